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
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, MessagesState, StateGraph

from remem.checkpoint import postgres as postgres_module
from remem.checkpoint import sqlite as sqlite_module
from remem.checkpoint._codec import patch_base
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


def _patched_after_a_message_left_out(kind: str, target: str) -> list[Any]:
    """A thread whose head holds "x1" (stored as a patch of "x0") and "hi", and not "x0", which is read
    in a statement after the head's items: the head's messages."""

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [*(RemoveMessage(id=str(m.id)) for m in state["messages"][:-1]), AIMessage("hi")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    with open_saver(kind, target) as saver:
        graph = builder.compile(checkpointer=saver)
        for i in range(2):
            graph.invoke({"messages": [HumanMessage(f"x{i}")]}, CONFIG)
        messages: list[Any] = saver.get_tuple(CONFIG).checkpoint["channel_values"]["messages"]
    assert [m.content for m in messages] == ["x1", "hi"]
    return messages


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_base_deleted_outside_remem_is_still_called_damaged(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A base no row holds in a read's snapshot (PostgreSQL's get_tuple reads again in one to see) is damage."""
    target = str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "cp.db")
    _patched_after_a_message_left_out(kind, target)
    bases = {patch_base(bytes(data)) for (data,) in _sql(kind, target, "SELECT data FROM remem_cp_items")}
    for base in bases - {None}:
        _sql(kind, target, "DELETE FROM remem_cp_items WHERE item_no = ?", (base,))
    with (
        open_saver(kind, target) as reader,
        pytest.raises(StorageError, match="Restore the database from a backup"),
    ):
        reader.get_tuple(CONFIG)


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_thread_deleted_between_a_reads_items_and_their_bases_is_read_again_not_called_damaged(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message stored as a patch of an earlier item (schema v6: its base) is read in one statement, the
    base in the next. A delete_thread committed between them: PostgreSQL's get_tuple, which takes no
    snapshot, reads again in one and finds the thread gone (it said to restore a backup); SQLite's read
    is one snapshot, which still holds the thread."""
    target = str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "cp.db")
    before = _patched_after_a_message_left_out(kind, target)
    module = sqlite_module if kind == "sqlite" else postgres_module
    real = module.execute
    item_reads = []

    def deleting_before_the_bases(cur: Any, statement: Any, *args: Any) -> Any:
        if "item_no, data FROM remem_cp_items" in statement.sql:
            item_reads.append(statement.params)
            if len(item_reads) == 2:  # the bases of the patched items the first read found
                with open_saver(kind, target) as other:
                    other.delete_thread("t")
        return real(cur, statement, *args)

    with open_saver(kind, target) as reader:
        monkeypatch.setattr(module, "execute", deleting_before_the_bases)
        got = reader.get_tuple(CONFIG)
    assert len(item_reads) >= 2
    if kind == "postgres":
        assert got is None
    else:
        assert got is not None and got.checkpoint["channel_values"]["messages"] == before
    with open_saver(kind, target) as saver:
        assert saver.get_tuple(CONFIG) is None
