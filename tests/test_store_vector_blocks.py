"""SQLite's vector blocks (store schema v6, issue 22 point 1): a fresh process's first search reads a
namespace's vectors from a few block rows, not one row per vector; it loads only the namespaces it searches;
a block never goes stale (triggers drop it when a vector of its range changes) and an erased vector leaves
no copy in one. Work is counted (vector rows read per statement, blocks), never timed.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langgraph.store.base import PutOp

from remem._statements import drive
from remem.store import SqliteStore
from remem.store import _blocks as blocks
from remem.store._vectors import VectorMatrix
from remem.testing import FakeEmbedder

DIMS = 16
INDEX: dict[str, Any] = {"dims": DIMS, "embed": FakeEmbedder(DIMS, seed=3), "fields": ["text"]}
BLOCK = 8


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "BLOCK_ROWS", BLOCK)


def _text(i: int) -> str:
    words = ["river", "tea", "garden", "train", "invoice", "concert", "bread", "laptop", "museum", "exam"]
    rng = random.Random(i)
    return f"note {i} " + " ".join(rng.choice(words) for _ in range(6))


def _fill(path: Path, ns: tuple[str, ...], count: int, start: int = 0, batch: int = 5) -> None:
    with SqliteStore.from_conn_string(path, index=INDEX) as store:
        for first in range(start, start + count, batch):
            store.batch(
                [
                    PutOp(ns, f"d{i}", {"text": _text(i)})
                    for i in range(first, min(first + batch, start + count))
                ]
            )


def _blocks_of(path: Path) -> list[tuple[int, int, int, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT ns_id, lo, hi, rows FROM remem_vector_blocks ORDER BY ns_id, lo"
        ).fetchall()


def _counting(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """(vector rows read by each row-by-row statement, block rows read by each block statement)."""
    rows: list[int] = []
    packed: list[int] = []
    run = store._execute

    def counting(request: Any) -> Any:
        found = run(request)
        if "embedding FROM remem_vectors" in request.sql:
            rows.append(len(found))
        if "vectors FROM remem_vector_blocks" in request.sql:
            packed.append(sum(int(r[1]) for r in found))
        return found

    monkeypatch.setattr(store, "_execute", counting)
    return rows, packed


def _search(store: SqliteStore, ns: tuple[str, ...], query: str) -> list[tuple[str, float]]:
    return [(h.key, round(float(h.score or 0), 6)) for h in store.search(ns, query=query, limit=6)]


def _without_blocks(path: Path, tmp_path: Path) -> Path:
    """A copy of the file whose blocks are gone (every vector read row by row): the reference."""
    copy = tmp_path / "reference.db"
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
        dst.execute("DELETE FROM remem_vector_blocks")
    return copy


def test_writes_pack_a_namespace_and_a_fresh_store_reads_its_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v.db"
    _fill(path, ("docs",), 43)
    stored = _blocks_of(path)
    # blocks of BLOCK vectors each, in item order, disjoint; fewer than BLOCK left unpacked at the end
    assert [r[3] for r in stored] == [BLOCK] * 5
    assert all(a[2] < b[1] for a, b in itertools.pairwise(stored))
    queries = [_text(i) for i in (2, 17, 40, 99)]
    with SqliteStore.from_conn_string(_without_blocks(path, tmp_path), index=INDEX) as reference:
        expected = [_search(reference, ("docs",), q) for q in queries]
    with SqliteStore.from_conn_string(path, index=INDEX) as store:
        rows, packed = _counting(store, monkeypatch)
        assert [_search(store, ("docs",), q) for q in queries] == expected
    assert packed == [40]  # the load: one statement for the blocks...
    assert sum(rows) <= 43 - 40 + 6  # ...and the few unpacked vectors (plus keyword hits scored by id)


def test_only_the_namespaces_searched_are_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v.db"
    _fill(path, ("users", "a"), 20)
    _fill(path, ("users", "b"), 30, start=100)
    with SqliteStore.from_conn_string(path, index=INDEX, search_mode="vector") as store:
        rows, packed = _counting(store, monkeypatch)
        _search(store, ("users", "a"), "tea")
        assert sum(rows) + sum(packed) == 20
        _search(store, ("users", "a"), "train")  # held: nothing read again
        assert sum(rows) + sum(packed) == 20
        _search(store, ("users", "b"), "bread")
        assert sum(rows) + sum(packed) == 50
        store.put(
            ("users", "c"), "new", {"text": "a museum exam"}
        )  # a namespace not held: read when searched
        assert _search(store, ("users", "c"), "a museum exam")[0][0] == "new"
        assert sum(rows) + sum(packed) == 51
        assert _search(store, ("users",), "a museum exam")[0][0] == "new"
        assert sum(rows) + sum(packed) == 51


def test_a_changed_or_deleted_vector_drops_its_block_and_leaves_no_copy(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    _fill(path, ("docs",), 24)
    before = _blocks_of(path)
    assert len(before) == 3
    with SqliteStore.from_conn_string(path, index=INDEX) as store:
        gone = store.get(("docs",), "d3")
        assert gone is not None
        with sqlite3.connect(path) as conn:
            (erased,) = conn.execute(
                "SELECT v.embedding FROM remem_vectors v JOIN remem_items i ON i.id = v.item_id WHERE i.key = 'd3'"
            ).fetchone()
        store.delete(("docs",), "d3")
        assert _blocks_of(path) == before[1:]  # its block went (a delete packs nothing)
        _assert_no_copy(path, bytes(erased))
        # d12's block goes too: 15 vectors between the blocks, packed again by this write
        store.put(("docs",), "d12", {"text": "an entirely new text about bread"})
    assert [r[3] for r in _blocks_of(path)] == [BLOCK, 15 - BLOCK, BLOCK]
    _assert_no_copy(path, bytes(erased))
    with SqliteStore.from_conn_string(path, index=INDEX, search_mode="vector") as store:
        found = _search(store, ("docs",), "an entirely new text about bread")
        assert found[0][0] == "d12" and found[0][1] == pytest.approx(1.0, abs=1e-5)
        assert "d3" not in {k for k, _ in _search(store, ("docs",), _text(3))}
    _fill(path, ("docs",), 10, start=200)
    assert sum(r[3] for r in _blocks_of(path)) == 23 + BLOCK  # two left unpacked


def _assert_no_copy(path: Path, vector: bytes) -> None:
    with sqlite3.connect(path) as conn:
        for (vectors,) in conn.execute("SELECT vectors FROM remem_vector_blocks"):
            assert vector not in bytes(vectors)


def test_an_item_put_again_with_the_same_text_keeps_its_block(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    _fill(path, ("docs",), 16)

    def stored() -> list[tuple[int, int]]:  # rowids too: a block dropped and packed again has a new one
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT rowid, lo FROM remem_vector_blocks ORDER BY lo").fetchall()

    before = stored()
    with SqliteStore.from_conn_string(path, index=INDEX) as store:
        store.put(("docs",), "d3", {"text": _text(3), "seen": True})  # another field, the same text
        assert store.get(("docs",), "d3").value["seen"] is True  # type: ignore[union-attr]
        assert stored() == before
        store.put(("docs",), "d4", {"text": "a new text for d4"})
    assert stored()[1] == before[1] and stored()[0] != before[0]  # dropped, packed again


def test_blocks_and_rows_load_exactly_the_stored_vectors(tmp_path: Path) -> None:
    """Random puts, overwrites and deletes in two namespaces: what a load reads (blocks and gaps) is, row
    for row, what remem_vectors holds."""
    path = tmp_path / "v.db"
    rng = random.Random(5)
    with SqliteStore.from_conn_string(path, index=INDEX) as store:
        for _ in range(40):
            ops = []
            for _ in range(rng.randint(1, 9)):
                ns = ("n", rng.choice("ab"))
                key = f"k{rng.randint(0, 60)}"
                value = None if rng.random() < 0.2 else {"text": _text(rng.randint(0, 500))}
                ops.append(PutOp(ns, key, value))
            store.batch(ops)
        with sqlite3.connect(path) as conn:
            truth = sorted(
                (int(ns), int(item), bytes(vec))
                for ns, item, vec in conn.execute("SELECT ns_id, item_id, embedding FROM remem_vectors")
            )
            ns_ids = [int(r[0]) for r in conn.execute("SELECT DISTINCT ns_id FROM remem_vectors")]
        matrix = VectorMatrix(DIMS)
        drive(blocks.load_program(ns_ids, DIMS, matrix), store._execute)
    assert _blocks_of(path)  # some were packed, some dropped and packed again
    n = len(matrix)
    loaded = sorted(
        (int(ns), int(item), vec.astype(np.float32).tobytes())
        for item, ns, vec in zip(matrix._items[:n], matrix._ns[:n], matrix._vecs[:n], strict=True)
    )
    assert loaded == truth


def test_a_store_written_before_blocks_opens_and_is_packed_by_its_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v.db"
    _fill(path, ("docs",), 30)
    with sqlite3.connect(path) as conn:  # as schema v5 left it
        conn.execute("DROP TABLE remem_vector_blocks")
        conn.execute("DROP INDEX remem_vectors_ns_item")
        conn.execute("DELETE FROM remem_schema WHERE component = 'store' AND version = 6")
    with SqliteStore.from_conn_string(path, index=INDEX) as store:
        rows, _ = _counting(store, monkeypatch)
        assert _search(store, ("docs",), _text(4))[0][0] == "d4"
        assert sum(rows) >= 30
        store.put(("docs",), "one-more", {"text": "one more note"})
    assert sum(r[3] for r in _blocks_of(path)) == 24
