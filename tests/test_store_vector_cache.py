"""The SQLite store's in-process vector matrix is kept across commits elsewhere that change no vector (a
thread lease's fencing token is one, in the same file, at every leased write), and read again after one
that does (issue 22, point 1: a card refresh in a long-running process read every vector of the store).

Work is counted, never timed: the vector rows each search reads from the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.base import PutOp

from remem import Memory
from remem.store import SqliteStore
from remem.testing import FakeEmbedder, offline_settings

NS = ("docs",)
INDEX: dict[str, Any] = {"dims": 16, "embed": FakeEmbedder(16), "fields": ["text"]}


def _count_vector_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    read: list[int] = []
    run = store._execute

    def counting(request: Any) -> Any:
        rows = run(request)
        if "embedding FROM remem_vectors" in request.sql:
            read.append(len(rows))
        return rows

    monkeypatch.setattr(store, "_execute", counting)
    return read


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[SqliteStore, SqliteStore, Path]]:
    path = tmp_path / "v.db"
    with (
        SqliteStore.from_conn_string(path, index=INDEX) as a,
        SqliteStore.from_conn_string(path, index=INDEX) as b,
    ):
        a.batch([PutOp(NS, f"d{i}", {"text": f"note number {i} about apples"}) for i in range(40)])
        yield a, b, path


def _keys(store: SqliteStore, query: str) -> list[str]:
    return [h.key for h in store.search(NS, query=query, limit=3)]


def test_a_commit_elsewhere_that_changes_no_vector_keeps_the_matrix(
    two: tuple[SqliteStore, SqliteStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _, path = two
    read = _count_vector_reads(a, monkeypatch)
    _keys(a, "apples")
    assert sum(read) == 40
    with sqlite3.connect(path) as other:  # as a lease's fencing token is bumped: another table, same file
        other.execute("CREATE TABLE IF NOT EXISTS unrelated (x)")
        other.execute("INSERT INTO unrelated VALUES (1)")
    a.put(NS, "own", {"text": "an own note about pears"})  # the store's own writes reach the matrix in place
    with sqlite3.connect(path) as other:
        other.execute("INSERT INTO unrelated VALUES (2)")
    assert _keys(a, "an own note about pears")[0] == "own"
    assert sum(read) == 40  # read once


def test_a_vector_written_added_or_removed_elsewhere_is_seen(
    two: tuple[SqliteStore, SqliteStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, _ = two
    _keys(a, "apples")
    read = _count_vector_reads(a, monkeypatch)
    b.put(NS, "new", {"text": "a note about cherries"})
    assert _keys(a, "a note about cherries")[0] == "new"
    b.put(NS, "new", {"text": "now it is about plums"})  # the same row, its vector replaced in place
    assert _keys(a, "now it is about plums")[0] == "new"
    b.delete(NS, "new")
    assert "new" not in _keys(a, "now it is about plums")
    assert len(read) >= 3  # read again after each of the other store's changes


def test_a_card_refresh_in_a_long_running_process_reads_no_vector_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory.from_url(f"sqlite:///{tmp_path / 'm.db'}", settings=offline_settings()) as memory:
        thread = memory.thread("t", user_id="u")
        thread.add_messages(
            [HumanMessage(f"My locker {i} is in building {i % 7}.", id=f"m{i}") for i in range(200)]
        )
        thread.get_context_card()
        read = _count_vector_reads(memory.store, monkeypatch)
        for n in range(3):  # each append holds the thread's lease: its fencing token moves in the file
            thread.add_messages(
                [HumanMessage(f"My cousin {n} moved to Porto.", id=f"x{n}"), AIMessage("Noted.", id=f"y{n}")]
            )
            card = thread.get_context_card()
        assert card.content
        assert sum(read) == 0  # (a write looks its texts up among stored vectors: no row here)
