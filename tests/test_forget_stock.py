"""``remem forget`` on a database that holds only LangGraph's stock checkpoints.

It used to say "nothing was stored for thread ..." while the stock checkpoints held the thread, and to
create remem's tables there (14; bare ``remem forget`` 8). Now it says what the database holds, points to
``remem import``, creates nothing, and erases the stock checkpoints of the thread (or the user) when asked
to with ``--stock``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from click.testing import CliRunner
from langgraph.graph import START, StateGraph

from remem.cli import main


class State(TypedDict):
    said: Annotated[list[str], operator.add]


@contextmanager
def _stock_saver(kind: str, target: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as saver:
            saver.setup()
            yield saver


def _seed(saver: Any) -> None:
    builder = StateGraph(State)
    builder.add_node("echo", lambda state: {"said": ["echo"]})
    builder.add_edge(START, "echo")
    graph = builder.compile(checkpointer=saver)
    for thread, user in (("t1", "maya"), ("t2", "maya"), ("t3", "bob")):
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        graph.invoke({"said": [f"secret of {thread}"]}, config)


def _tables(kind: str, target: str) -> set[str]:
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    with psycopg.connect(target, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def _threads(kind: str, target: str) -> set[str]:
    with _stock_saver(kind, target) as saver:
        return {t.config["configurable"]["thread_id"] for t in saver.list(None)}


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_forget_on_a_stock_only_database_says_so_creates_nothing_and_erases_when_asked(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        target = str(tmp_path / "stock.db")
        url = f"sqlite:///{target}"
    else:
        target = url = str(request.getfixturevalue("pg_url"))
    with _stock_saver(kind, target) as saver:
        _seed(saver)
    tables = _tables(kind, target)
    runner = CliRunner()

    told = runner.invoke(main, ["forget", "--thread", "t1", "--db", url, "--yes"])
    assert told.exit_code == 1, told.output
    assert "stock checkpoints" in told.stderr and "remem import" in told.stderr and "--stock" in told.stderr
    assert "nothing was stored" not in told.stderr
    bare = runner.invoke(main, ["forget", "--db", url])
    assert bare.exit_code == 0 and "no unfinished erasure" in bare.output, bare.output
    assert _tables(kind, target) == tables  # nothing created
    assert _threads(kind, target) == {"t1", "t2", "t3"}

    thread = runner.invoke(main, ["forget", "--thread", "t1", "--stock", "--db", url, "--yes"])
    assert thread.exit_code == 0, thread.output
    assert "t1" in thread.output and "yes" in thread.output  # compacted
    assert _threads(kind, target) == {"t2", "t3"}
    user = runner.invoke(main, ["forget", "--user", "maya", "--stock", "--db", url, "--yes"])
    assert user.exit_code == 0, user.output
    assert _threads(kind, target) == {"t3"}
    assert _tables(kind, target) == tables
    if kind == "sqlite":
        assert b"secret of t1" not in Path(target).read_bytes()
        assert b"secret of t3" in Path(target).read_bytes()
    again = runner.invoke(main, ["forget", "--thread", "t1", "--stock", "--db", url, "--yes"])
    assert again.exit_code == 1 and "no stock checkpoints of thread t1" in again.stderr
