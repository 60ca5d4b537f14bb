"""Write programs: puts (their namespaces, keyword rows and vectors, embedded ahead), deletes by item id,
the reindex a migration queues. See :mod:`remem.store._program`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from langgraph.store.base import (
    Op,
    PutOp,
    SearchOp,
)

from remem.errors import ConfigError, RememUsageError
from remem.store import _core as core
from remem.store import _embedder
from remem.store import _keyword as kw
from remem.store._core import IndexPlan, SearchMode
from remem.store._exec import Program, Statement, Tx, VecChanged, Vector, many
from remem.store._rows import _CHUNK, Dialect, _rows_by_key, core_hash, validate_op
from remem.store._schema import ITEMS, NS, VECTORS


def check_put(op: PutOp, *, encode: bool = False) -> None:
    """Refuse a put that could not be stored as given (before any SQL runs; ``encode``: try the JSON too)."""
    validate_op(op)
    core.validate_key(op.key)
    if op.value is not None:
        if not isinstance(op.value, dict):
            raise RememUsageError(f"an item value must be a dict, got {type(op.value).__name__}")
        if encode:
            core.dumps(op.value)


def _ns_ids(d: Dialect, paths: Iterable[str]) -> Program[dict[str, int]]:
    """Ids of namespace paths, creating the missing ones. Namespaces are nearly always there already, so
    they are looked up first: one statement per put instead of an insert and a lookup."""
    wanted = sorted(set(paths))
    ids = yield from _known_ns_ids(d, wanted)
    missing = [p for p in wanted if p not in ids]
    if missing:
        yield many(
            d.q(f"INSERT INTO {NS} (path, depth) VALUES (?, ?) ON CONFLICT (path) DO NOTHING"),
            [(p, p.count(core.SEP) + 1) for p in missing],
        )
        ids.update((yield from _known_ns_ids(d, missing)))
    return ids


def _known_ns_ids(d: Dialect, paths: list[str]) -> Program[dict[str, int]]:
    ids: dict[str, int] = {}
    for start in range(0, len(paths), _CHUNK):
        chunk = paths[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        rows = yield Statement(d.q(f"SELECT path, id FROM {NS} WHERE path IN ({marks})"), chunk)
        ids.update({r[0]: int(r[1]) for r in rows})
    return ids


def _wanted(plan: IndexPlan | None, upserts: list[PutOp]) -> list[tuple[PutOp, list[tuple[str, str]]]]:
    """Each upsert with the (vector path, text) pairs it embeds."""
    wanted: list[tuple[PutOp, list[tuple[str, str]]]] = []
    for op in upserts:
        assert op.value is not None
        fields = core.embedded(core.index_fields(plan, op.index))
        wanted.append((op, core.texts_for(op.value, fields) if plan is not None else []))
    return wanted


Known = dict[tuple[str, str, str], tuple[bytes, Any]]
"""Stored vectors by (namespace path, key, vector path): (text hash, embedding as the driver reads it)."""


def _known_vectors(
    d: Dialect, plan: IndexPlan | None, wanted: list[tuple[PutOp, list[tuple[str, str]]]]
) -> Program[tuple[Known, bool]]:
    """Stored vectors of these items, and whether that holds every stored vector of them: the texts not to
    embed again."""
    known: Known = {}
    if plan is None or not any(t for _, t in wanted):
        return known, False
    paths = sorted({core.ns_path(op.namespace) for op, _ in wanted})
    keys = sorted({op.key for op, _ in wanted})
    if len(paths) > _CHUNK or len(keys) > _CHUNK:
        return known, False
    rows = yield Statement(
        d.q(
            f"SELECT n.path, i.key, v.path, v.text_hash, v.embedding FROM {VECTORS} v "
            f"JOIN {ITEMS} i ON i.id = v.item_id JOIN {NS} n ON n.id = i.ns_id "
            f"WHERE n.path IN ({', '.join('?' for _ in paths)}) "
            f"AND i.key IN ({', '.join('?' for _ in keys)})"
        ),
        [*paths, *keys],
    )
    return {(r[0], r[1], r[2]): (bytes(r[3]), r[4]) for r in rows}, True


def _to_embed(wanted: list[tuple[PutOp, list[tuple[str, str]]]], known: Known) -> dict[bytes, str]:
    to_embed: dict[bytes, str] = {}
    for op, texts in wanted:
        for path, text in texts:
            h = core_hash(text)
            if known.get((core.ns_path(op.namespace), op.key, path), (b"", b""))[0] != h:
                to_embed.setdefault(h, text)
    return to_embed


def check_dims(plan: IndexPlan, matrix: npt.NDArray[np.float32]) -> None:
    if matrix.shape[1] != plan.dims:
        raise ConfigError(
            f"the embedder returned {matrix.shape[1]} dims but index['dims'] is {plan.dims}; "
            "set dims to the embedder's output size"
        )


def texts_to_embed_program(
    d: Dialect, plan: IndexPlan | None, ops: Sequence[Op], mode: SearchMode
) -> Program[dict[bytes, str]]:
    """The texts a batch will need embedded (by text hash): its search queries and the put texts whose
    stored vectors differ. A read, run before the write transaction, so that the model (the slow part)
    never runs while the database's write lock is held; the write embeds only what changed since."""
    texts: dict[bytes, str] = {}
    if plan is None:
        return texts
    if mode in ("hybrid", "vector"):
        for op in ops:
            if isinstance(op, SearchOp) and op.query and op.query.strip():
                texts.setdefault(core_hash(op.query), op.query)
    puts = {(op.namespace, op.key): op for op in ops if isinstance(op, PutOp)}
    upserts = [op for op in puts.values() if op.value is not None]
    if upserts:
        for op in upserts:
            check_put(op)
        wanted = _wanted(plan, upserts)
        known, _ = yield from _known_vectors(d, plan, wanted)
        texts.update(_to_embed(wanted, known))
    return texts


def put_program(d: Dialect, tx: Tx, plan: IndexPlan | None, puts: list[PutOp], now: float) -> Program[None]:
    """Write the puts (value None: delete); ``tx.ready`` holds the vectors embedded ahead."""
    deletes = [p for p in puts if p.value is None]
    upserts = [p for p in puts if p.value is not None]
    wanted = _wanted(plan, upserts)
    known, looked_up = yield from _known_vectors(d, plan, wanted)
    to_embed = _to_embed(wanted, known)
    late = {h: t for h, t in to_embed.items() if h not in tx.ready}
    if late:  # changed since the texts were embedded ahead (another writer): nothing written, run again
        tx.unembedded.update(late)
        return None
    if to_embed and plan is not None:  # new vectors: the store's embedder is recorded, or is this one
        yield from _embedder.record_program(d, plan)
    if deletes:
        doomed = yield from _rows_by_key(
            d, [(core.ns_path(op.namespace), op.key) for op in deletes], None, "i.id"
        )
        yield from delete_ids(d, tx, sorted(int(r[0]) for r in doomed.values()))
    if not upserts:
        return None
    vectors = {h: tx.ready[h] for h in to_embed}
    values: list[tuple[PutOp, dict[str, Any], str]] = []  # (op, value, keyword text)
    for op, _ in wanted:
        assert op.value is not None
        # index=False: not searchable by a query, neither by its words nor by a vector (as LangGraph's)
        text = "" if op.index is False else core.keyword_text(op.value, core.index_fields(plan, op.index))
        values.append((op, dict(op.value), text))
    ns_ids: dict[str, int] = {}
    item_ids: dict[tuple[int, str], int] = {}
    if len(values) == 1:
        # one put: namespace lookup, upsert and id in one statement; only a namespace that does not exist
        # yet needs more (it is created below and the upsert runs again)
        op, value, text = values[0]
        params = d.upsert_params(0, op.key, value, text, now, op.ttl)[1:]
        rows = yield Statement(
            d.q(d.upsert_in_namespace() + " RETURNING id, ns_id"), [*params, core.ns_path(op.namespace)]
        )
        if rows:
            ns_ids[core.ns_path(op.namespace)] = int(rows[0][1])
            item_ids[(int(rows[0][1]), op.key)] = int(rows[0][0])
    if not item_ids:
        ns_ids = yield from _ns_ids(d, (core.ns_path(op.namespace) for op in upserts))
        upsert_rows = [
            d.upsert_params(ns_ids[core.ns_path(op.namespace)], op.key, value, text, now, op.ttl)
            for op, value, text in values
        ]
        if len(upsert_rows) == 1:
            rows = yield Statement(d.q(d.upsert() + " RETURNING id"), upsert_rows[0])
            item_ids = {(int(upsert_rows[0][0]), values[0][0].key): int(rows[0][0])}
        else:
            yield many(d.q(d.upsert()), upsert_rows)
            item_ids = yield from _item_ids(d, [(int(r[0]), str(r[1])) for r in upsert_rows])
    kw_texts = {(ns_ids[core.ns_path(op.namespace)], op.key): text for op, _, text in values}
    yield from kw.write_ops(d, [(item_ids[k], text) for k, text in kw_texts.items()], d.keywords)
    if plan is None:
        return None
    added: list[tuple[int, int, Vector]] = []
    new_rows: list[tuple[int, int, str, bytes, Any]] = []
    stored_paths: dict[tuple[str, str], set[str]] = {}
    for ns_path, key, path in known:
        stored_paths.setdefault((ns_path, key), set()).add(path)
    clear: list[tuple[int]] = []  # items whose stored vectors are not known: delete them all
    stale: list[tuple[int, str]] = []  # known vectors of a path the item no longer has
    for op, texts in wanted:
        ns_id = ns_ids[core.ns_path(op.namespace)]
        item_id = item_ids[(ns_id, op.key)]
        if looked_up:
            keep = {path for path, _ in texts}
            stored = stored_paths.get((core.ns_path(op.namespace), op.key), set())
            stale.extend((item_id, p) for p in sorted(stored) if p not in keep)
        else:
            clear.append((item_id,))
        for path, text in texts:
            h = core_hash(text)
            vec = vectors.get(h)
            if vec is None:
                vec = _decode_vector(d, known[(core.ns_path(op.namespace), op.key, path)][1])
            new_rows.append((item_id, ns_id, path, h, d.vector_param(vec)))
            added.append((item_id, ns_id, vec))
    changed = sorted(set(item_ids.values()))
    # a new item, or one whose paths stay the same (nearly every put), needs no delete: the upsert below
    # replaces its rows in place
    if clear:
        yield many(d.q(f"DELETE FROM {VECTORS} WHERE item_id = ?"), clear)
    if stale:
        yield many(d.q(f"DELETE FROM {VECTORS} WHERE item_id = ? AND path = ?"), stale)
    if new_rows:
        # in namespace order: on PostgreSQL each row's statement takes its namespace's change-count row
        # lock (store schema v7), so two batches over the same namespaces take them in the same order
        new_rows.sort(key=lambda row: (row[1], row[0], row[2]))
        yield many(
            d.q(
                f"INSERT INTO {VECTORS} (item_id, ns_id, path, text_hash, embedding) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (item_id, path) DO UPDATE SET ns_id = excluded.ns_id, "
                "text_hash = excluded.text_hash, embedding = excluded.embedding "
                # an unchanged vector is not written again: on SQLite its block stays (schema v6's
                # triggers), and other processes keep their matrices (v5's count does not move)
                f"WHERE {VECTORS}.text_hash <> excluded.text_hash OR {VECTORS}.ns_id <> excluded.ns_id"
            ),
            new_rows,
        )
        yield from d.vectors_written(sorted({ns_id for _, ns_id, _ in added}), plan.dims)
    tx.changes.append(VecChanged(changed, added))
    return None


def _item_ids(d: Dialect, keys: list[tuple[int, str]]) -> Program[dict[tuple[int, str], int]]:
    """Item ids of (ns_id, key) pairs, looked up after an upsert."""
    by_ns: dict[int, list[str]] = {}
    for ns_id, key in keys:
        by_ns.setdefault(ns_id, []).append(key)
    out: dict[tuple[int, str], int] = {}
    for ns_id, ns_keys in by_ns.items():
        for start in range(0, len(ns_keys), _CHUNK):
            chunk = ns_keys[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            rows = yield Statement(
                d.q(f"SELECT key, id FROM {ITEMS} WHERE ns_id = ? AND key IN ({marks})"), [ns_id, *chunk]
            )
            out.update({(ns_id, r[0]): int(r[1]) for r in rows})
    return out


def _decode_vector(d: Dialect, raw: Any) -> Vector:
    if isinstance(raw, bytes | bytearray | memoryview):
        return np.frombuffer(bytes(raw), dtype=np.float32)
    if isinstance(raw, str):
        return np.asarray(json.loads(raw), dtype=np.float32)
    return np.asarray(raw, dtype=np.float32)


def delete_ids(d: Dialect, tx: Tx, ids: list[int]) -> Program[tuple[int, int, int]]:
    """Delete items with their vectors and keyword rows; returns (items, vectors, keyword rows)."""
    items = vectors = keyword_rows = 0
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        cond, params = d.ids_condition("item_id", chunk)
        vectors += int((yield Statement(d.q(f"DELETE FROM {VECTORS} WHERE {cond}"), params, "count"))[0][0])
        keyword_rows += yield from kw.delete_ops(d, chunk, d.keywords)
        cond, params = d.ids_condition("id", chunk)
        items += int((yield Statement(d.q(f"DELETE FROM {ITEMS} WHERE {cond}"), params, "count"))[0][0])
    if ids:
        tx.changes.append(VecChanged(ids, []))
    return items, vectors, keyword_rows


def reindex_program(d: Dialect) -> Program[int]:
    """Index the items schema v3 queued (``remem_reindex``) and drop the queue: run by setup() in the
    migration's transaction. An item queued without its text is indexed on all its strings."""
    from remem.store._schema import REINDEX_TABLE

    if not (yield Statement(d.q(_exists(d, REINDEX_TABLE)), [REINDEX_TABLE])):
        return 0
    rows = yield Statement(
        d.q(f"SELECT r.item_id, r.text, i.value FROM {REINDEX_TABLE} r JOIN {ITEMS} i ON i.id = r.item_id")
    )
    texts = [
        (int(r[0]), r[1] if r[1] is not None else core.keyword_text(core.loads(r[2]), [("$", "$")]))
        for r in rows
    ]
    for start in range(0, len(texts), _CHUNK):
        yield from kw.write_ops(d, texts[start : start + _CHUNK], d.keywords)
    yield Statement(d.q(f"DROP TABLE {REINDEX_TABLE}"), (), "none")
    return len(texts)


def _exists(d: Dialect, table: str) -> str:
    if d.name == "sqlite":
        return "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return "SELECT 1 WHERE to_regclass(?) IS NOT NULL"
