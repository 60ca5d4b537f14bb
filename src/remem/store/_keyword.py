"""Keyword search, written once for both backends: the index's tables, BM25 ranking and its statistics.

Each item's keyword text is split by :mod:`remem.store._text`; the index holds one row per (word, item)::

    remem_terms(term, item_id, tf, dl)        tf: the word's count in the item, dl: the item's word count
    remem_term_docs(item_id, dl, terms)       one row per indexed item; ``terms`` lists its words

A query is ranked with Okapi BM25 (k1 = 1.2, b = 0.75, FTS5's defaults) in one SQL statement that both
SQLite and PostgreSQL run as written, over statistics (item count, mean length, each word's item count)
read from the same tables, so both backends give the same hits in the same order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from remem.layout import STORE_TERM_DOCS_TABLE, STORE_TERMS_TABLE
from remem.store import _core as core
from remem.store import _text
from remem.store._exec import Hits, Program, Statement, many
from remem.store._schema import ITEMS

if TYPE_CHECKING:
    from remem.store._rows import Dialect

__all__ = ["KeywordCache", "delete_ops", "encode", "search_ops", "write_ops", "write_statements"]

TERMS = STORE_TERMS_TABLE
DOCS = STORE_TERM_DOCS_TABLE
K1, B = 1.2, 0.75
STATS_TTL = 2.0  # seconds an item count and mean length are reused (also refreshed by this store's writes)
# The every-term query narrows the items by looking up at most this many of the rarest terms; its
# HAVING still requires every term. PostgreSQL plans the look-ups (semi-joins) as one join problem whose
# memory grows steeply with their number: 7 (8 terms) took 160 MB to plan, 17 took 2.6 GB.
EVERY_LOOKUPS = 4


@dataclass
class KeywordCache:
    """Statistics one store reuses between searches: they move slowly, and BM25 barely notices 10%."""

    docs: int = -1
    total: int = 0
    at: float = 0.0
    writes: int = 0  # items this store indexed or deleted since ``docs`` was read
    df: dict[str, tuple[int, int]] = field(default_factory=dict)  # term -> (items holding it, docs then)

    def wrote(self, count: int) -> None:
        self.writes += count

    def fresh(self) -> bool:
        if self.docs < 0 or time.monotonic() - self.at > STATS_TTL:
            return False
        return self.writes <= max(self.docs // 10, 0)


def encode(terms: dict[str, int]) -> str:
    """An item's words as ``remem_term_docs.terms`` holds them."""
    return " ".join(f"{t} {n}" for t, n in sorted(terms.items()))


def _decode(text: str) -> list[str]:
    parts = text.split(" ")
    return parts[0::2] if text else []


# ---------------------------------------------------------------- writes


def write_ops(d: Dialect, rows: Sequence[tuple[int, str]], cache: KeywordCache) -> Program[None]:
    """Index each (item id, keyword text), replacing what the item had; unchanged texts cost one read.

    Never fold this read into the items' upsert: the upsert waits for the row lock of a concurrent writer
    of the same item, but a statement reads with the snapshot it started with, so it would miss the words
    that writer committed. A statement of its own, after the upsert, sees them."""
    if not rows:
        return None
    new = {item_id: dict(_text.index_terms(text)) for item_id, text in rows}
    ids = sorted(new)
    replace = d.keyword_replace([(i, new[i]) for i in ids])
    if replace is not None:  # the read, the comparison and the writes in one statement
        written = yield replace
        cache.wrote(int(written[0][0]) if written else 0)
        return None
    old: dict[int, str] = {}
    for start in range(0, len(ids), core.CHUNK):
        cond, params = d.ids_condition("item_id", ids[start : start + core.CHUNK])
        found = yield Statement(d.q(f"SELECT item_id, terms FROM {DOCS} WHERE {cond}"), params)
        old.update({int(r[0]): str(r[1]) for r in found})
    removed: list[tuple[str, int]] = []
    added: list[tuple[str, int, int, int]] = []  # of items indexed before (upserted), then of new ones
    fresh: list[tuple[str, int, int, int]] = []
    docs: list[tuple[int, int, str]] = []
    for item_id in ids:
        terms = new[item_id]
        encoded = encode(terms)
        before = old.get(item_id)
        if before == encoded:
            continue
        if before is not None:  # the words it no longer has; those it keeps are overwritten below
            removed.extend((t, item_id) for t in _decode(before) if t not in terms)
        length = sum(terms.values())
        (added if before is not None else fresh).extend(
            (t, item_id, n, length) for t, n in sorted(terms.items())
        )
        docs.append((item_id, length, encoded))
    # a loop, not ``yield from`` a list: the driver sends each statement's rows back
    for statement in write_statements(d, removed, added, fresh, docs):  # noqa: UP028
        yield statement
    cache.wrote(len(docs))
    return None


def write_statements(
    d: Dialect,
    removed: Sequence[tuple[str, int]],
    added: Sequence[tuple[str, int, int, int]],
    fresh: Sequence[tuple[str, int, int, int]],
    docs: Sequence[tuple[int, int, str]],
) -> list[Statement]:
    """The statements of :func:`write_ops`: (term, item) rows removed, (term, item, tf, dl) rows upserted
    (``added``) or inserted (``fresh``: items not indexed before; a plain insert costs less), (item, dl,
    terms) documents upserted."""
    out = []
    if removed:
        out.append(many(d.q(f"DELETE FROM {TERMS} WHERE term = ? AND item_id = ?"), removed))
    if added:
        out.append(
            many(
                d.q(
                    f"INSERT INTO {TERMS} (term, item_id, tf, dl) VALUES (?, ?, ?, ?) ON CONFLICT (term, item_id) "
                    "DO UPDATE SET tf = excluded.tf, dl = excluded.dl"
                ),
                added,
            )
        )
    if fresh:
        out.append(many(d.q(f"INSERT INTO {TERMS} (term, item_id, tf, dl) VALUES (?, ?, ?, ?)"), fresh))
    if docs:
        out.append(
            many(
                d.q(
                    f"INSERT INTO {DOCS} (item_id, dl, terms) VALUES (?, ?, ?) ON CONFLICT (item_id) DO UPDATE "
                    "SET dl = excluded.dl, terms = excluded.terms"
                ),
                docs,
            )
        )
    return out


def delete_ops(d: Dialect, ids: Sequence[int], cache: KeywordCache) -> Program[int]:
    """Remove these items from the index; returns how many were indexed."""
    cond, params = d.ids_condition("item_id", ids)
    found = yield Statement(d.q(f"SELECT item_id, terms FROM {DOCS} WHERE {cond}"), params)
    removed = [(t, int(r[0])) for r in found for t in _decode(str(r[1]))]
    if removed:
        yield many(d.q(f"DELETE FROM {TERMS} WHERE term = ? AND item_id = ?"), removed)
    if found:
        yield Statement(d.q(f"DELETE FROM {DOCS} WHERE {cond}"), params, "none")
    cache.wrote(len(found))
    return len(found)


# ---------------------------------------------------------------- search


def _stats(d: Dialect, cache: KeywordCache) -> Program[tuple[int, int]]:
    if not cache.fresh():
        rows = yield Statement(d.q(f"SELECT count(*), coalesce(sum(dl), 0) FROM {DOCS}"), [])
        docs, total = (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)
        if abs(docs - cache.docs) > docs // 10:
            cache.df.clear()
        cache.docs, cache.total, cache.at, cache.writes = docs, total, time.monotonic(), 0
    return cache.docs, cache.total


def _doc_frequencies(
    d: Dialect, terms: Sequence[str], docs: int, cache: KeywordCache
) -> Program[dict[str, int]]:
    out: dict[str, int] = {}
    missing: list[str] = []
    for term in terms:
        hit = cache.df.get(term)
        if hit is not None and abs(hit[1] - docs) <= docs // 10:
            out[term] = hit[0]
        else:
            missing.append(term)
    if missing:
        marks = ", ".join("?" for _ in missing)
        rows = yield Statement(
            d.q(f"SELECT term, count(*) FROM {TERMS} WHERE term IN ({marks}) GROUP BY term"), missing
        )
        counted = {str(r[0]): int(r[1]) for r in rows}
        if len(cache.df) > 50_000:
            cache.df.clear()
        for term in missing:
            out[term] = counted.get(term, 0)
            cache.df[term] = (out[term], docs)
    return out


def idf(docs: int, df: int) -> float:
    """BM25's inverse document frequency, never negative (a word in most items weighs almost nothing)."""
    return math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def _rank_sql(
    d: Dialect,
    weights: dict[str, float],
    mean: float,
    *,
    every: bool,
    lowest: int | None,
    join: bool,
    now: float,
    ns_ids: Sequence[int] | None,
    item_ids: Sequence[int] | None,
    limit: int,
) -> tuple[str, list[Any]]:
    terms = sorted(weights)
    cases = " ".join("WHEN ? THEN ?" for _ in terms)
    score = f"SUM((CASE p.term {cases} END) * p.tf * {K1 + 1} / (p.tf + {K1} * ({1 - B} + {B} * p.dl / ?)))"
    params: list[Any] = [x for t in terms for x in (t, weights[t])]
    params.append(mean)
    where = [f"p.term IN ({', '.join('?' for _ in terms)})"]
    params.extend(terms)
    source = f"{TERMS} p"
    if every and len(terms) > 1:
        # Every term required: the rarest term's items, each kept only if the next rarest term is there,
        # then the next (most fail at the first look-up: about one look-up an item, where looking every
        # term up in each cost one per term). Only the few rarest are looked up (EVERY_LOOKUPS): the
        # items left after them are few, and the HAVING below keeps only those holding every term.
        rarest_first = sorted(terms, key=lambda t: (weights[t], t), reverse=True)
        inner = f"SELECT r.item_id FROM {TERMS} r WHERE r.term = ?"
        params.append(rarest_first[0])
        if lowest is not None:
            inner += " AND r.item_id > ?"
            params.append(lowest)
        for n, term in enumerate(rarest_first[1 : 1 + EVERY_LOOKUPS]):
            inner += (
                f" AND EXISTS (SELECT 1 FROM {TERMS} x{n} WHERE x{n}.term = ? AND x{n}.item_id = r.item_id)"
            )
            params.append(term)
        where.append(f"p.item_id IN ({inner})")
    if lowest is not None:
        where.append("p.item_id > ?")
        params.append(lowest)
    if join:
        source += f" JOIN {ITEMS} i ON i.id = p.item_id"
        where.append("(i.expires_at IS NULL OR i.expires_at > ?)")
        params.append(now)
        if ns_ids is not None:
            cond, extra = d.ids_condition("i.ns_id", ns_ids)
            where.append(cond)
            params.extend(extra)
        if item_ids is not None:
            cond, extra = d.ids_condition("i.id", item_ids)
            where.append(cond)
            params.extend(extra)
    sql = f"SELECT p.item_id, {score} AS s FROM {source} WHERE {' AND '.join(where)} GROUP BY p.item_id"
    if every:
        sql += " HAVING count(*) = ?"
        params.append(len(terms))
    sql += " ORDER BY s DESC, p.item_id LIMIT ?"
    params.append(limit)
    return d.q(sql), params


def _live(d: Dialect, ids: list[int], now: float, ns_ids: Sequence[int] | None) -> Program[set[int]]:
    cond, params = d.ids_condition("id", ids)
    sql = f"SELECT id FROM {ITEMS} WHERE {cond} AND (expires_at IS NULL OR expires_at > ?)"
    params.append(now)
    if ns_ids is not None:
        extra, more = d.ids_condition("ns_id", ns_ids)
        sql += f" AND {extra}"
        params.extend(more)
    rows = yield Statement(d.q(sql), params)
    return {int(r[0]) for r in rows}


def _ranked(
    d: Dialect,
    weights: dict[str, float],
    mean: float,
    every: bool,
    lowest: int | None,
    k: int,
    now: float,
    ns_ids: Sequence[int] | None,
    item_ids: Sequence[int] | None,
) -> Program[Hits]:
    """The ``k`` best live matches: filtered while ranking when a filter narrows the items, else the
    whole index ranked and the best few checked (ranking deeper until ``k`` pass or matches run out)."""
    if item_ids is not None or ns_ids is not None:
        sql, params = _rank_sql(
            d, weights, mean, every=every, lowest=lowest, join=True, now=now,
            ns_ids=ns_ids, item_ids=item_ids, limit=k,
        )  # fmt: skip
        rows = yield Statement(sql, params)
        return [(int(r[0]), float(r[1])) for r in rows]
    limit = max(k * 4, 64)
    while True:
        sql, params = _rank_sql(
            d, weights, mean, every=every, lowest=lowest, join=False, now=now,
            ns_ids=None, item_ids=None, limit=limit,
        )  # fmt: skip
        rows = yield Statement(sql, params)
        keep = (yield from _live(d, [int(r[0]) for r in rows], now, None)) if rows else set()
        found = [(int(r[0]), float(r[1])) for r in rows if int(r[0]) in keep]
        if len(found) >= k or len(rows) < limit:
            return found[:k]
        limit *= 8


def search_ops(
    d: Dialect,
    terms: Sequence[str],
    k: int,
    ns_ids: Sequence[int] | None,
    item_ids: Sequence[int] | None,
    now: float,
    cache: KeywordCache,
    budget: int,
) -> Program[Hits]:
    """The ``k`` best (item id, BM25 score) pairs for ``terms`` among live items in ``ns_ids`` / ``item_ids``
    (None: any), best first. On a large index only the rarest terms are ranked (see ``core.plan_keyword``)."""
    if not terms or k <= 0:
        return []
    docs, total = yield from _stats(d, cache)
    if docs == 0:
        return []
    mean = max(total / docs, 1.0)
    df = yield from _doc_frequencies(d, terms, docs, cache)
    planned = core.plan_keyword(terms, None if docs <= budget else df, docs, budget)
    newest: int | None = None
    for attempt in planned:
        weights = {t: idf(docs, df.get(t, 0)) for t in attempt.terms if df.get(t, 0) > 0}
        if not weights:
            continue
        lowest = None
        if attempt.newest is not None:
            if newest is None:
                rows = yield Statement(d.q(f"SELECT coalesce(max(item_id), 0) FROM {DOCS}"), [])
                newest = int(rows[0][0]) if rows else 0
            lowest = newest - attempt.newest
        found = yield from _ranked(d, weights, mean, attempt.every, lowest, k, now, ns_ids, item_ids)
        if found and (attempt.partial or len(found) >= k):
            return found
    return []
