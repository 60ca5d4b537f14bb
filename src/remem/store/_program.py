"""The stores' logic, written once as programs: generators of SQL statements (see :mod:`remem.store._exec`).

A sync driver runs a program with a sqlite3 or psycopg connection, an async driver with an async one; the
programs never touch a connection. SQL is written with ``?`` placeholders; a dialect rewrites them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from remem.errors import ConfigError, RememUsageError
from remem.store import _core as core
from remem.store import _fusion as fusion
from remem.store import _keyword as kw
from remem.store import _text
from remem.store._core import IndexPlan, ScoredItem, SearchMode
from remem.store._exec import Hits, Program, Rows, Statement, Tx, VecChanged, Vector, many
from remem.store._schema import ITEMS, NS, VECTORS

_ITEM_COLS = "i.id, n.path, i.key, i.value, i.created_at, i.updated_at, i.ttl_minutes"
_LIVE = "(i.expires_at IS NULL OR i.expires_at > ?)"
_CHUNK = core.CHUNK


class Dialect:
    """SQL that differs between SQLite and Postgres (programs only call these methods), and the keyword
    statistics one store reuses between searches."""

    name = "base"

    def __init__(self, keyword_budget: int = 2000) -> None:
        self.keywords = kw.KeywordCache()
        self.keyword_budget = keyword_budget

    def q(self, sql: str) -> str:
        return sql

    def ns_condition(self, prefix: Sequence[str], col: str = "n.path") -> tuple[str, list[Any]]:
        bounds = core.prefix_bounds(prefix)
        if bounds is None:
            return "1=1", []
        exact, low, high = bounds
        return f"({col} = ? OR ({col} > ? AND {col} < ?))", [exact, low, high]

    def ids_condition(self, col: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def filter_condition(self, key: str, kind: str, value: Any) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def upsert_parts(self) -> tuple[str, list[str], str]:
        """(columns, one value expression per column, ON CONFLICT clause) of the item upsert; ns_id first."""
        raise NotImplementedError

    def upsert(self) -> str:
        columns, values, conflict = self.upsert_parts()
        return f"INSERT INTO {ITEMS} ({columns}) VALUES ({', '.join(values)}) {conflict}"

    def upsert_in_namespace(self) -> str:
        """The upsert with the namespace id looked up by path (the last parameter) in the same statement;
        it writes nothing when the namespace does not exist yet."""
        columns, values, conflict = self.upsert_parts()
        return (
            f"INSERT INTO {ITEMS} ({columns}) SELECT n.id, {', '.join(values[1:])} FROM {NS} n "
            f"WHERE n.path = ? {conflict}"
        )

    def upsert_params(
        self, ns_id: int, key: str, value: dict[str, Any], text: str, now: float, ttl: float | None
    ) -> list[Any]:
        raise NotImplementedError

    def keyword_replace(self, items: Sequence[tuple[int, dict[str, int]]]) -> Statement | None:
        """One statement that replaces the keyword rows of (item id, {word: count}) where they
        changed and returns one row with how many items it rewrote; None: ``_keyword.write_ops`` reads the
        old words, compares them and writes."""
        return None

    def keyword_relevance(self, raw: float) -> float:
        """A keyword score mapped into [0, 1], higher is better (bm25 is unbounded: s / (1 + s))."""
        return max(raw, 0.0) / (1.0 + max(raw, 0.0))

    def vector_param(self, vec: Vector) -> Any:
        return np.asarray(vec, dtype=np.float32).tobytes()


# ---------------------------------------------------------------- batch


def batch_program(
    d: Dialect,
    tx: Tx,
    plan: IndexPlan | None,
    ops: Iterable[Op],
    mode: SearchMode,
    now: float | None = None,
    *,
    omit_expired: bool = False,
) -> Program[list[Result]]:
    """All ops of a batch: reads in order against the state before the batch, then the puts (last one wins).
    ``tx.ready``: vectors embedded ahead (see :func:`texts_to_embed_program`); ``now``: the store's clock
    (default: the system's). ``omit_expired`` (``TTLConfig["omit_expired"]``): reads leave out items past
    their expiry that no sweep has deleted yet; without it they see them until a sweep, as LangGraph's."""
    ops = list(ops)
    results: list[Result] = [None] * len(ops)
    puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
    now = time.time() if now is None else now
    seen = now if omit_expired else -math.inf  # reads see the items that expire after this
    for op in ops:
        validate_op(op)
    answered: dict[
        str, Result
    ] = {}  # every read sees the state before the puts: an identical read, one answer
    gets = [op for op in ops if isinstance(op, GetOp)]
    for op in gets:
        core.validate_key(op.key)
    found: dict[tuple[str, str], tuple[Any, ...]] | None = None
    if len(gets) > 1:  # every get of the batch in a few statements instead of one each
        found = yield from _rows_by_key(d, [(core.ns_path(op.namespace), op.key) for op in gets], seen)
    # (an identical read is found by its repr, worth its cost only where a batch has more than one read)
    reads = sum(1 for op in ops if not isinstance(op, PutOp))
    for i, op in enumerate(ops):
        same = None if isinstance(op, PutOp) or reads < 2 else repr(op)
        if same is not None and same in answered:
            results[i] = answered[same]
            continue
        if isinstance(op, GetOp) and found is not None:
            row = found.get((core.ns_path(op.namespace), op.key))
            if row is not None and op.refresh_ttl:
                _touch(tx, [row])
            results[i] = None if row is None else _item(row)
        elif isinstance(op, GetOp):
            results[i] = yield from get_program(d, tx, op, seen)
        elif isinstance(op, SearchOp):
            results[i] = list[SearchItem]((yield from search_program(d, tx, plan, op, mode, seen)))
        elif isinstance(op, ListNamespacesOp):
            results[i] = yield from list_namespaces_program(d, op, seen)
        elif isinstance(op, PutOp):
            check_put(op)
            puts[(op.namespace, op.key)] = op
        else:
            raise RememUsageError(
                f"unknown store operation {type(op).__name__}; use GetOp, PutOp, SearchOp, ListNamespacesOp"
            )
        if same is not None:
            answered[same] = results[i]
    if puts and not tx.unembedded:  # (a read missed its vector: no write before the batch runs again)
        yield from put_program(d, tx, plan, list(puts.values()), now)
    return results


def check_put(op: PutOp, *, encode: bool = False) -> None:
    """Refuse a put that could not be stored as given (before any SQL runs; ``encode``: try the JSON too)."""
    validate_op(op)
    core.validate_key(op.key)
    if op.value is not None:
        if not isinstance(op.value, dict):
            raise RememUsageError(f"an item value must be a dict, got {type(op.value).__name__}")
        if encode:
            core.dumps(op.value)


def validate_op(op: Op) -> None:
    if isinstance(op, GetOp | PutOp):
        core.validate_namespace(op.namespace)
    elif isinstance(op, SearchOp):
        core.validate_namespace(tuple(op.namespace_prefix), allow_empty=True)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            core.validate_namespace(tuple(condition.path), allow_empty=True)
    validate_op_namespace(op)  # and LangGraph's own checks


def _item(row: Sequence[Any], score: float | None = None) -> Item:
    _, path, key, value, created, updated = row[:6]
    return Item(
        value=core.loads(value),
        key=key,
        namespace=core.ns_tuple(path),
        created_at=core.to_datetime(created),
        updated_at=core.to_datetime(updated),
    )


def _touch(tx: Tx, rows: Iterable[Sequence[Any]]) -> None:
    """Ask for the expiry of these item rows (those with a TTL) to be refreshed after the read."""
    tx.touched.extend(int(r[0]) for r in rows if r[6] is not None)


def refresh_program(d: Dialect, ids: list[int], now: float) -> Program[None]:
    """Push back the expiry of items read with ``refresh_ttl`` (a write; see :attr:`Tx.touched`)."""
    for start in range(0, len(ids), _CHUNK):
        cond, params = d.ids_condition("id", ids[start : start + _CHUNK])
        yield Statement(
            d.q(
                f"UPDATE {ITEMS} SET expires_at = ? + ttl_minutes * 60 WHERE ttl_minutes IS NOT NULL AND {cond}"
            ),
            [now, *params],
            "none",
        )


def _rows_by_key(
    d: Dialect, keys: Sequence[tuple[str, str]], now: float | None, cols: str = _ITEM_COLS
) -> Program[dict[tuple[str, str], tuple[Any, ...]]]:
    """Item rows by (namespace path, key), a few hundred pairs per statement (``now``: live ones only)."""
    out: dict[tuple[str, str], tuple[Any, ...]] = {}
    pairs = sorted(set(keys))
    step = _CHUNK // 2
    for start in range(0, len(pairs), step):
        chunk = pairs[start : start + step]
        values = ", ".join("(?, ?)" for _ in chunk)
        live = f" WHERE {_LIVE}" if now is not None else ""
        # the pairs as a table joined to the unique indexes (a row-value IN would scan every item on SQLite)
        rows = yield Statement(
            d.q(
                f"SELECT n.path, i.key, {cols} FROM (VALUES {values}) w JOIN {NS} n ON n.path = w.column1 "
                f"JOIN {ITEMS} i ON i.ns_id = n.id AND i.key = w.column2{live}"
            ),
            [x for pair in chunk for x in pair] + ([now] if now is not None else []),
        )
        out.update({(str(r[0]), str(r[1])): r[2:] for r in rows})
    return out


def get_program(d: Dialect, tx: Tx, op: GetOp, now: float) -> Program[Item | None]:
    rows = yield Statement(
        d.q(
            f"SELECT {_ITEM_COLS} FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id "
            f"WHERE n.path = ? AND i.key = ? AND {_LIVE}"
        ),
        [core.ns_path(op.namespace), op.key, now],
    )
    if not rows:
        return None
    if op.refresh_ttl:
        _touch(tx, rows[:1])
    return _item(rows[0])


def list_namespaces_program(d: Dialect, op: ListNamespacesOp, now: float) -> Program[list[tuple[str, ...]]]:
    where, params = "1=1", list[Any]()
    for cond in op.match_conditions or ():
        if cond.match_type not in ("prefix", "suffix"):
            raise RememUsageError(f"unknown match type {cond.match_type!r}; use 'prefix' or 'suffix'")
        if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
            where, params = d.ns_condition(tuple(cond.path))
    rows = yield Statement(
        d.q(
            f"SELECT n.path FROM {NS} n WHERE {where} AND EXISTS "
            f"(SELECT 1 FROM {ITEMS} i WHERE i.ns_id = n.id AND {_LIVE})"
        ),
        [*params, now],
    )
    namespaces = [core.ns_tuple(r[0]) for r in rows]
    for cond in op.match_conditions or ():
        namespaces = [ns for ns in namespaces if _matches(cond.match_type, tuple(cond.path), ns)]
    if op.max_depth is not None:
        namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
    else:
        namespaces = sorted(namespaces)
    return namespaces[op.offset : op.offset + op.limit]


def _matches(kind: str, path: tuple[str, ...], ns: tuple[str, ...]) -> bool:
    if len(ns) < len(path):
        return False
    pairs = (
        zip(ns, path, strict=False) if kind == "prefix" else zip(reversed(ns), reversed(path), strict=False)
    )
    return all(p == "*" or a == p for a, p in pairs)


# ---------------------------------------------------------------- search


def _filtered_rows(
    d: Dialect, prefix: Sequence[str], filt: dict[str, Any], now: float, page: tuple[int, int] | None
) -> Program[Rows]:
    """Live items under ``prefix`` matching ``filt``, as LangGraph's SQL stores list them: the most
    recently updated first, ties by namespace and key; ``page`` = (offset, limit)."""
    ns_where, params = d.ns_condition(prefix)
    where = [ns_where, _LIVE]
    params.append(now)
    push = core.plan_filter(filt)
    for key, kind, value in push.conditions:
        cond, extra = d.filter_condition(key, kind, value)
        where.append(cond)
        params.extend(extra)
    sql = (
        f"SELECT {_ITEM_COLS} FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id "
        f"WHERE {' AND '.join(where)} ORDER BY i.updated_at DESC, n.path, i.key"
    )
    exact = push.exact and page is not None
    if exact and page is not None:
        sql += " LIMIT ? OFFSET ?"
        params.extend([max(page[1], 0), max(page[0], 0)])
    rows = yield Statement(d.q(sql), params)
    if not push.exact:
        rows = [r for r in rows if core.matches(core.loads(r[3]), filt)]
    if page is not None and not exact:
        rows = rows[page[0] : page[0] + page[1]]
    return rows


def search_program(
    d: Dialect, tx: Tx, plan: IndexPlan | None, op: SearchOp, mode: SearchMode, now: float
) -> Program[list[ScoredItem]]:
    if mode not in core.SEARCH_MODES:
        raise RememUsageError(f"unknown search mode {mode!r}; use one of {', '.join(core.SEARCH_MODES)}")
    filt = core.validate_filter(op.filter)
    prefix = tuple(op.namespace_prefix)
    core.validate_namespace(prefix, allow_empty=True)
    offset, limit = max(op.offset, 0), max(op.limit, 0)
    if not op.query or not op.query.strip():
        rows = yield from _filtered_rows(d, prefix, filt, now, (offset, limit))
        items = [_search_item(r, None, "list", {}) for r in rows]
        if op.refresh_ttl:
            _touch(tx, rows)
        return items
    if mode == "vector" and plan is None:
        raise ConfigError(
            "vector search needs an index: open the store with index={'dims': ..., 'embed': ...}"
        )
    allowed: list[int] | None = None
    if filt:
        rows = yield from _filtered_rows(d, prefix, filt, now, None)
        allowed = [int(r[0]) for r in rows]
        if not allowed:
            return []
    depth = offset + limit
    fetch = max(depth, 50) if mode == "hybrid" else depth
    keyword: Hits = []
    vector: Hits = []
    ns_ids: list[int] | None = None
    if prefix:
        ns_where, params = d.ns_condition(prefix, "path")
        ns_ids = [int(r[0]) for r in (yield Statement(d.q(f"SELECT id FROM {NS} WHERE {ns_where}"), params))]
        if not ns_ids:
            return []
        if len(ns_ids) == int((yield Statement(d.q(f"SELECT count(*) FROM {NS}"), []))[0][0]):
            ns_ids = None  # the prefix covers every namespace: no need to filter
    if mode in ("hybrid", "keyword"):
        terms = _text.query_terms(op.query)
        if terms:
            keyword = yield from kw.search_ops(
                d, terms, fetch, ns_ids, allowed, now, d.keywords, d.keyword_budget
            )
    qvec: Vector | None = None
    if mode in ("hybrid", "vector") and plan is not None:
        qvec = tx.vector(core_hash(op.query), op.query)
        if qvec is None:  # the driver embeds it and runs the program again
            return []
        vector = yield from tx.vectors.search(qvec, fetch + 8, ns_ids, allowed)
    scores: dict[int, dict[str, float]] = {}
    for rank, (item_id, score) in enumerate(keyword, start=1):
        scores.setdefault(item_id, {}).update(keyword=score, keyword_rank=rank)
    for rank, (item_id, score) in enumerate(vector, start=1):
        scores.setdefault(item_id, {}).update(vector=score, vector_rank=rank)
    used: SearchMode = "keyword" if mode == "hybrid" and plan is None else mode
    if used == "keyword":
        ranked = [(i, s) for i, s in keyword]
    elif used == "vector":
        ranked = [(i, s) for i, s in vector]
    else:
        if fusion.DEFAULT.needs_scores and qvec is not None:  # keyword-only candidates: their similarity too
            unscored = [i for i, s in scores.items() if "vector" not in s]
            if unscored:
                for item_id, score in (yield from tx.vectors.search(qvec, len(unscored), None, unscored)):
                    scores[item_id]["vector"] = score
        fused = fusion.fuse(scores)
        ranked = sorted(fused.items(), key=lambda kv: -kv[1])
        for item_id, value in fused.items():
            scores[item_id]["fused"] = value
    rows_by_id = yield from _rows_by_id(d, [i for i, _ in ranked[: depth + 8]], now)
    live = [i for i, _ in ranked if i in rows_by_id][offset:depth]
    if used == "hybrid" and qvec is not None:
        # hits found by keyword alone get their similarity too: a hybrid hit's score is its vector score
        unscored = [i for i in live if "vector" not in scores[i]]
        if unscored:
            for item_id, score in (yield from tx.vectors.search(qvec, len(unscored), None, unscored)):
                scores[item_id]["vector"] = score
    if op.refresh_ttl:
        _touch(tx, (rows_by_id[i] for i in live))
    return [_search_item(rows_by_id[i], relevance(d, scores[i]), used, scores[i]) for i in live]


def relevance(d: Dialect, scores: dict[str, float]) -> float:
    """The ``score`` a stock user reads: the vector similarity (cosine by default, as InMemoryStore reports
    it) where the hit has one, else its keyword relevance mapped into [0, 1]."""
    if "vector" in scores:
        return scores["vector"]
    return d.keyword_relevance(scores.get("keyword", 0.0))


def _search_item(row: Sequence[Any], score: float | None, mode: str, scores: dict[str, float]) -> ScoredItem:
    _, path, key, value, created, updated = row[:6]
    return ScoredItem(
        core.ns_tuple(path),
        key,
        core.loads(value),
        core.to_datetime(created),
        core.to_datetime(updated),
        score=score,
        mode=mode,
        scores=scores,
    )


def _rows_by_id(d: Dialect, ids: list[int], now: float) -> Program[dict[int, tuple[Any, ...]]]:
    out: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(ids), _CHUNK):
        cond, params = d.ids_condition("i.id", ids[start : start + _CHUNK])
        rows = yield Statement(
            d.q(f"SELECT {_ITEM_COLS} FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id WHERE {cond} AND {_LIVE}"),
            [*params, now],
        )
        out.update({int(r[0]): r for r in rows})
    return out


# ---------------------------------------------------------------- writes


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
        fields = core.index_fields(plan, op.index)
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
        yield many(
            d.q(
                f"INSERT INTO {VECTORS} (item_id, ns_id, path, text_hash, embedding) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (item_id, path) DO UPDATE SET ns_id = excluded.ns_id, "
                "text_hash = excluded.text_hash, embedding = excluded.embedding"
            ),
            new_rows,
        )
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


def core_hash(text: str) -> bytes:
    from remem.embeddings import text_hash

    return text_hash(text)


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
