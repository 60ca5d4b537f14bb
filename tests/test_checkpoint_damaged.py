"""A checkpoint whose stored body was damaged or tampered with gives remem's StorageError, saying what to
do, on every read and on the write that extends it; nothing is written. Before, each raised a bare
``TypeError`` (``RawBody() argument after * must be an iterable``) from the decoder (issue 24, point 13)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import ormsgpack
import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from remem.errors import StorageError
from tests import matrix
from tests.lease_workers import open_saver

CONFIG: Any = {"configurable": {"thread_id": "t"}}
BODIES = [b"garbage", ormsgpack.packb(7), ormsgpack.packb([1, 2]), ormsgpack.packb([1, "ts", 3, 4, 5, 6, 7])]


def _graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [AIMessage("hi")]})
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=saver)


def _sql(kind: str, target: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if kind == "postgres":
        with psycopg.connect(target) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []
    with contextlib.closing(sqlite3.connect(target)) as conn, conn:
        return conn.execute(statement, params).fetchall()


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
@pytest.mark.parametrize("body", BODIES, ids=["bytes", "int", "short", "wrong-types"])
def test_a_damaged_checkpoint_body_is_a_storage_error_and_nothing_is_written(
    kind: str, body: bytes, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "cp.db")
    with open_saver(kind, target) as saver:
        _graph(saver).invoke({"messages": [HumanMessage("x")]}, CONFIG)
    _sql(kind, target, "UPDATE remem_cp_checkpoints SET body = ?", (body,))
    (before,) = _sql(kind, target, "SELECT COUNT(*) FROM remem_cp_checkpoints")
    with open_saver(kind, target) as saver:
        for read in (lambda: saver.get_tuple(CONFIG), lambda: list(saver.list(CONFIG))):
            with pytest.raises(StorageError, match=r"body is damaged.*remem forget --thread"):
                read()
        with pytest.raises(StorageError, match="body is damaged"):
            _graph(saver).invoke({"messages": [HumanMessage("y")]}, CONFIG)
    assert _sql(kind, target, "SELECT COUNT(*) FROM remem_cp_checkpoints") == [before]


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_stored_list_gone_under_its_checkpoint_is_a_storage_error_and_nothing_is_written(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What a prune or a delete by another process leaves a call that read the checkpoint naming the list
    just before: a StorageError that says to run it again (it was a bare KeyError from the list rebuild)."""
    target = str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "cp.db")
    with open_saver(kind, target) as saver:
        graph = _graph(saver)
        for i in range(6):  # 12 messages: more than a checkpoint row holds inline, so a stored list
            graph.invoke({"messages": [HumanMessage(f"x{i}")]}, CONFIG)
    assert _sql(kind, target, "SELECT COUNT(*) FROM remem_cp_lists") != [(0,)]
    _sql(kind, target, "DELETE FROM remem_cp_lists")
    (before,) = _sql(kind, target, "SELECT COUNT(*) FROM remem_cp_checkpoints")
    with open_saver(kind, target) as saver:
        with pytest.raises(StorageError, match=r"list of the thread is gone.*run the call again"):
            saver.get_tuple(CONFIG)
        with pytest.raises(StorageError, match="list of the thread is gone"):
            _graph(saver).invoke({"messages": [HumanMessage("y")]}, CONFIG)
    assert _sql(kind, target, "SELECT COUNT(*) FROM remem_cp_checkpoints") == [before]
