"""Search programs: a filtered listing, or a query ranked by keyword and vector scores fused. See
:mod:`remem.store._program`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.store.base import (
    SearchOp,
)

from remem.errors import ConfigError, RememUsageError
from remem.store import _core as core
from remem.store import _embedder, _text
from remem.store import _fusion as fusion
from remem.store import _keyword as kw
from remem.store._core import IndexPlan, ScoredItem, SearchMode
from remem.store._exec import Hits, Program, Rows, Statement, Tx, Vector
from remem.store._rows import _ITEM_COLS, _LIVE, Dialect, _rows_by_id, _touch, core_hash
from remem.store._schema import ITEMS, NS


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
    # a query vector is compared only with vectors of its own model: the store's record is read in this
    # transaction (with the namespaces where there is a prefix, in the same statement)
    checks = plan is not None and mode in ("hybrid", "vector")
    if prefix:
        ns_where, params = d.ns_condition(prefix, "path")
        outside, _ = d.ns_condition(prefix, "o.path")
        record, record_params = _embedder.stored_value(d) if checks else ("NULL", [])
        # with, in the same statement, whether the prefix covers every namespace (then no need to filter):
        # no namespace outside it, which a scan finds at its first such row (a count read them all)
        found = yield Statement(
            d.q(
                f"SELECT id, NOT EXISTS (SELECT 1 FROM {NS} o WHERE NOT {outside}), {record} "
                f"FROM {NS} WHERE {ns_where}"
            ),
            [*params, *record_params, *params],
        )
        if not found:
            return []
        if checks and plan is not None:
            _embedder.check(plan, found[0][2], rechoose=True)
        ns_ids = None if found[0][1] else [int(r[0]) for r in found]
    elif checks and plan is not None:
        yield from _embedder.check_program(d, plan, rechoose=True)
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
