"""``remem import``: databases written by LangGraph's stock savers, in this test, copied into remem's savers;
the graph's history read through remem equals the one read through the stock saver."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver as StockPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver as StockSqliteSaver
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row

from remem.checkpoint import ImportReport, checkpointer_from_url, import_stock_checkpoints
from remem.cli import main
from remem.errors import NotFoundError


class Inner(TypedDict):
    notes: Annotated[list[str], operator.add]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]
    approved: bool


def _graph(checkpointer: Any) -> Any:
    inner = StateGraph(Inner)
    inner.add_node("note", lambda s: {"notes": [f"note {len(s['notes'])}"]})
    inner.add_edge(START, "note")
    inner.add_edge("note", END)

    def reply(state: State) -> dict[str, Any]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(f"re: {last}", id=f"ai-{len(state['messages'])}")]}

    def approve(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "ok?", "turns": len(state["messages"])})
        return {"approved": answer == "yes"}

    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_node("inner", inner.compile())
    builder.add_node("approve", approve)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "inner")
    builder.add_edge("inner", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=checkpointer)


def _talk(checkpointer: Any, threads: int = 3, turns: int = 3) -> None:
    graph = _graph(checkpointer)
    for t in range(threads):
        config = {"configurable": {"thread_id": f"thread-{t}"}}
        for turn in range(turns):
            graph.invoke({"messages": [HumanMessage(f"hello {turn}", id=f"h-{t}-{turn}")]}, config)
            if turn < turns - 1 or t % 2 == 0:  # odd threads end waiting at the interrupt (pending writes)
                graph.invoke(Command(resume="yes"), config)


def _history(checkpointer: Any, thread: str) -> list[Any]:
    graph = _graph(checkpointer)
    config = {"configurable": {"thread_id": thread}}
    return [
        (
            s.values,
            s.next,
            s.config,
            s.metadata,
            s.parent_config,
            s.created_at,
            [(task.id, task.name, task.interrupts) for task in s.tasks],
        )
        for s in graph.get_state_history(config)
    ]


def _every_checkpoint(saver: Any) -> list[Any]:
    return sorted(
        (
            t.config["configurable"]["thread_id"],
            t.config["configurable"]["checkpoint_ns"],
            t.config["configurable"]["checkpoint_id"],
            (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            t.metadata,
            sorted(t.pending_writes or [], key=repr),
            t.checkpoint["channel_values"],
        )
        for t in saver.list(None)
    )


def _same(stock: Any, remem: Any, threads: int = 3) -> None:
    for t in range(threads):
        expected = _history(stock, f"thread-{t}")
        assert len(expected) > 5
        assert _history(remem, f"thread-{t}") == expected
    assert _every_checkpoint(remem) == _every_checkpoint(stock)  # subgraph namespaces and writes included


@contextmanager
def _stock_sqlite(db: Path) -> Iterator[Any]:
    with StockSqliteSaver.from_conn_string(str(db)) as stock:
        yield stock


def test_a_stock_sqlite_database_imports_whole(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with _stock_sqlite(db) as stock:
        _talk(stock)
    report = import_stock_checkpoints(f"sqlite:///{db}", f"sqlite:///{tmp_path / 'remem.db'}")
    assert (report.threads, report.skipped) == (3, 0) and report.writes > 0
    with _stock_sqlite(db) as stock, checkpointer_from_url(tmp_path / "remem.db", create=False) as remem:
        assert report.checkpoints == len(list(stock.list(None)))
        _same(stock, remem)


def test_an_interrupted_import_finishes_when_run_again(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with _stock_sqlite(db) as stock:
        _talk(stock)

    class Stop(Exception):
        pass

    def stop_after_some(report: ImportReport) -> None:
        if report.checkpoints == 17:  # in the middle of a thread
            raise Stop

    with pytest.raises(Stop):
        import_stock_checkpoints(str(db), str(db), on_checkpoint=stop_after_some)  # into the same file
    again = import_stock_checkpoints(str(db), str(db))
    assert again.skipped > 0 and again.checkpoints > 0
    with _stock_sqlite(db) as stock, checkpointer_from_url(db, create=False) as remem:
        _same(stock, remem)
        # each stock checkpoint was skipped or copied; none already there (with its writes) copied again
        assert again.skipped + again.checkpoints == len(list(stock.list(None)))
        assert again.skipped == 17


def test_an_import_run_again_copies_nothing_and_touches_nothing(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with _stock_sqlite(db) as stock:
        _talk(stock)
        total = len(list(stock.list(None)))
    first = import_stock_checkpoints(str(db), str(db))
    with checkpointer_from_url(db, create=False) as remem:
        before = remem.stats()  # type: ignore[attr-defined]
    again = import_stock_checkpoints(str(db), str(db))
    assert (again.checkpoints, again.writes, again.skipped) == (0, 0, total), again
    assert first.checkpoints == total
    with checkpointer_from_url(db, create=False) as remem:
        assert remem.stats() == before  # type: ignore[attr-defined]  # "last written" included


@pytest.mark.postgres
def test_a_stock_postgres_database_imports_whole(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        stock = StockPostgresSaver(conn)
        stock.setup()
        _talk(stock, threads=2)
        report = import_stock_checkpoints(pg_url, pg_url)  # remem's tables beside the stock ones
        assert report.threads == 2
        with checkpointer_from_url(pg_url, create=False) as remem:
            _same(stock, remem, threads=2)


def test_remem_threads_on_a_stock_database_points_to_the_import(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with _stock_sqlite(db) as stock:
        _talk(stock, threads=2, turns=1)
    runner = CliRunner()
    url = f"sqlite:///{db}"
    shown = runner.invoke(main, ["threads", "--db", url])
    assert shown.exit_code != 0 and "stock saver" in shown.output and "remem import" in shown.output
    imported = runner.invoke(main, ["import", url])
    assert imported.exit_code == 0, imported.output
    assert "of 2 thread(s)" in imported.output
    listed = runner.invoke(main, ["threads", "--db", url])
    assert listed.exit_code == 0 and "thread-0" in listed.output and "thread-1" in listed.output


def test_importing_what_is_not_a_stock_database_says_so(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="there is no database"):
        import_stock_checkpoints(str(tmp_path / "nope.db"), str(tmp_path / "x.db"))
    with checkpointer_from_url(tmp_path / "remem.db"):
        pass
    with pytest.raises(NotFoundError, match="no LangGraph stock checkpoints"):
        import_stock_checkpoints(str(tmp_path / "remem.db"), str(tmp_path / "x.db"))
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("body", [b"\x93\x01garbage", b"\xc1\xc1\xc1"])  # a list, and no msgpack at all
def test_a_damaged_stock_row_is_named_with_the_way_forward(tmp_path: Path, body: bytes) -> None:
    import sqlite3

    db = tmp_path / "app.db"
    with _stock_sqlite(db) as stock:
        _talk(stock)
    conn = sqlite3.connect(db)
    thread, checkpoint = conn.execute(
        "SELECT thread_id, checkpoint_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id, checkpoint_id"
        " LIMIT 1 OFFSET 2"
    ).fetchone()
    conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?", (body, checkpoint))
    conn.commit()
    target = f"sqlite:///{tmp_path / 'remem.db'}"
    result = CliRunner().invoke(main, ["import", f"sqlite:///{db}", "--into", target])
    assert result.exit_code == 1, result.output
    assert f"checkpoint {checkpoint} of thread {thread!r}" in result.output and "damaged" in result.output
    assert "unexpected" not in result.output and "remem import` again" in result.output
    # Following the advice: the damaged row and the thread's later ones deleted, the import finishes.
    conn.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id >= ?", (thread, checkpoint))
    conn.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_id >= ?", (thread, checkpoint))
    conn.commit()
    conn.close()
    again = CliRunner().invoke(main, ["import", f"sqlite:///{db}", "--into", target])
    assert again.exit_code == 0, again.output
