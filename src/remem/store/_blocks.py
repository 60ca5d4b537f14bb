"""SQLite's vector blocks: a namespace's vectors packed ``BLOCK_ROWS`` to a row (store schema v6).

A fresh process's first vector search loads the in-process matrix (:mod:`remem.store.sqlite`). Read one
row per vector, most of that load was SQLite and Python making 100,000 row tuples (0.2 CPU s at 100k);
read from blocks, it is a few dozen rows and one ``np.frombuffer`` each. A block is a copy of every vector
of one namespace (of one size) whose item id lies in ``[lo, hi]``, in (item id, path) order: the items as
int64, the vectors as the float32 bytes their rows hold, so that a search scores exactly what it did.

``remem_vectors`` stays the record. The triggers of schema v6 delete every block that holds an item whose
vector is inserted, updated or deleted, in the writer's own transaction (any connection, any version of
remem), so a block is never stale and an erased vector leaves no copy behind. Writers pack (reads never
write): a write that added vectors to a namespace packs it once ``BLOCK_ROWS`` of its vectors lie in no
block. What no block covers (the gaps between blocks: the newest rows, a block dropped by an update) is
read row by row. Only the namespaces a search touches are loaded (:func:`load_program`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from remem.store._exec import Program, Rows, Statement
from remem.store._schema import BLOCKS, VECTORS
from remem.store._vectors import VectorMatrix, float_rows, id_column

__all__ = ["BLOCK_ROWS", "LOAD_PAGE", "Loaded", "load_program", "pack_program"]

BLOCK_ROWS = 1024
"""Vectors per block (1.5 MB a block at 384 dims); also how many unpacked vectors a namespace may gather."""

LOAD_PAGE = 8192
"""Unpacked vectors read per statement at most (only a page's rows are Python objects at once)."""

_READ_BYTES = 4 << 20  # block bytes read per statement at most (beyond one block)
_END = 2**63 - 1
Gap = tuple[int, int, int]
"""(namespace id, after, before): the item ids strictly between ``after`` and ``before`` are in no block."""

_UNPACKED = (
    f"SELECT g.key, v.ns_id, v.item_id, v.embedding FROM {VECTORS} v JOIN json_each(?) g "
    "ON v.ns_id = json_extract(g.value, '$[0]') AND v.item_id > json_extract(g.value, '$[1]') "
    "AND v.item_id < json_extract(g.value, '$[2]') WHERE length(v.embedding) = ?"
)
_COUNT_UNPACKED = (
    f"SELECT count(*) FROM {VECTORS} v JOIN json_each(?) g ON v.ns_id = json_extract(g.value, '$[0]') "
    "AND v.item_id > json_extract(g.value, '$[1]') AND v.item_id < json_extract(g.value, '$[2]') "
    "WHERE length(v.embedding) = ?"
)

Loaded = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]
"""(item ids, namespace ids, vectors): rows for :meth:`VectorMatrix.add`."""


def _gaps(ns_ids: Sequence[int], ranges: Sequence[tuple[int, int, int]]) -> list[Gap]:
    """The item-id ranges of these namespaces that no block covers; ``ranges``: (ns, lo, hi), sorted."""
    by_ns: dict[int, list[tuple[int, int]]] = {ns: [] for ns in ns_ids}
    for ns, lo, hi in ranges:
        by_ns.setdefault(ns, []).append((lo, hi))
    gaps: list[Gap] = []
    for ns, spans in by_ns.items():
        after = -1
        for lo, hi in spans:
            if lo > after + 1:
                gaps.append((ns, after, lo))
            after = hi
        gaps.append((ns, after, _END))
    return gaps


def load_program(ns_ids: Sequence[int], dims: int, into: VectorMatrix) -> Program[int]:
    """Add every vector of ``dims`` dimensions in these namespaces to ``into`` (room made once): the
    blocks' as stored, a few at a time, then the rest a page at a time, so that only one statement's rows
    are held beside the matrix. In the caller's transaction (one snapshot). Returns the vectors added."""
    if not ns_ids:
        return 0
    listed = json.dumps(list(ns_ids))
    spans = yield Statement(
        f"SELECT rowid, ns_id, lo, hi, rows FROM {BLOCKS} WHERE dims = ? "
        "AND ns_id IN (SELECT value FROM json_each(?)) ORDER BY ns_id, lo",
        (dims, listed),
    )
    gaps = _gaps(ns_ids, [(int(r[1]), int(r[2]), int(r[3])) for r in spans])
    (unpacked,) = (yield Statement(_COUNT_UNPACKED, (json.dumps(gaps), dims * 4)))[0]
    total = sum(int(r[4]) for r in spans) + int(unpacked)
    into.reserve(total)
    per_read = max(1, _READ_BYTES // (BLOCK_ROWS * dims * 4))
    for start in range(0, len(spans), per_read):
        ids = json.dumps([int(r[0]) for r in spans[start : start + per_read]])
        for ns, count, items, vectors in (
            yield Statement(
                f"SELECT ns_id, rows, items, vectors FROM {BLOCKS} WHERE rowid IN (SELECT value FROM json_each(?))",
                (ids,),
            )
        ):
            vecs = np.frombuffer(vectors, dtype=np.float32).reshape(int(count), dims)
            into.add(np.frombuffer(items, dtype=np.int64), np.full(int(count), int(ns), dtype=np.int64), vecs)
    page = LOAD_PAGE
    while gaps:
        rows = yield Statement(
            f"{_UNPACKED} ORDER BY g.key, v.item_id LIMIT ?", (json.dumps(gaps), dims * 4, page)
        )
        if len(rows) < page:
            if rows:
                into.add(*_arrays(rows))
            break
        # a full page: keep it up to its last item, whose rows (it may have more) the next page reads
        gap, item = int(rows[-1][0]), int(rows[-1][2])
        kept = [r for r in rows if int(r[0]) != gap or int(r[2]) != item]
        if not kept:  # one item with a page of vectors: read a larger page
            page *= 2
            continue
        into.add(*_arrays(kept))
        ns, _, before = gaps[gap]
        gaps = [(ns, item - 1, before), *gaps[gap + 1 :]]
    return total


def _arrays(rows: Rows) -> Loaded:
    """(gap, ns_id, item_id, embedding) rows as a part of a load."""
    return id_column(rows, 2), id_column(rows, 1), float_rows(rows, 3)


def pack_program(ns_ids: Sequence[int], dims: int) -> Program[int]:
    """Pack the unpacked vectors of these namespaces into blocks where ``BLOCK_ROWS`` of them gathered
    (run by a writer, in its transaction, after it wrote vectors there); returns the blocks written.

    In each gap, runs of ``BLOCK_ROWS`` vectors (cut between items, never inside one) become blocks; a gap
    between two blocks is packed whole, the open one after the last block keeps its remainder unpacked."""
    written = 0
    for ns in ns_ids:
        spans = yield Statement(
            f"SELECT ns_id, lo, hi FROM {BLOCKS} WHERE ns_id = ? AND dims = ? ORDER BY lo", (ns, dims)
        )
        gaps = _gaps([ns], [(int(r[0]), int(r[1]), int(r[2])) for r in spans])
        param = json.dumps(gaps)
        (count,) = (yield Statement(_COUNT_UNPACKED, (param, dims * 4)))[0]
        if count < BLOCK_ROWS:
            continue
        open_gap = len(gaps) - 1
        # all of them at once: BLOCK_ROWS and a little more as a rule (a file written before v6, once)
        rows = yield Statement(f"{_UNPACKED} ORDER BY g.key, v.item_id, v.path", (param, dims * 4))
        run: list[tuple[int, bytes]] = []
        for index, row in enumerate(rows):
            gap, item = int(row[0]), int(row[2])
            run.append((item, row[3]))
            following = rows[index + 1] if index + 1 < len(rows) else None
            ends_gap = following is None or int(following[0]) != gap
            ends_item = following is None or int(following[2]) != item
            if (len(run) >= BLOCK_ROWS and ends_item) or (ends_gap and gap != open_gap):
                yield _block_statement(ns, dims, run)
                written += 1
                run = []
            elif ends_gap:
                run = []  # the open gap's remainder stays unpacked
    return written


def _block_statement(ns: int, dims: int, run: list[tuple[int, bytes]]) -> Statement:
    items = np.array([item for item, _ in run], dtype=np.int64)
    return Statement(
        f"INSERT INTO {BLOCKS} (ns_id, dims, lo, hi, rows, items, vectors) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (ns, dims, int(items[0]), int(items[-1]), len(run), items.tobytes(), b"".join(v for _, v in run)),
        "none",
    )
