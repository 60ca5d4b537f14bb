"""PostgreSQL's SQL for the store, as pure logic (no driver here): its dialect, the vector search programs
(pgvector's HNSW index or the exact NumPy path) and the probe of the vector column. ``postgres.py`` runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from remem.layout import STORE_TERM_DOCS_TABLE, STORE_TERMS_TABLE
from remem.store import _core as core
from remem.store import _keyword as kw
from remem.store import _rows
from remem.store._core import IndexPlan
from remem.store._exec import Hits, Program, Statement, Vector
from remem.store._schema import VECTORS
from remem.store._vector_cache import RunCache

__all__ = ["PGVECTOR", "PostgresDialect", "PostgresVectors", "vector_column"]

# pgvector's operator, the score stock stores report from its distance, and the HNSW operator class
PGVECTOR = {
    "cosine": ("<=>", "1 - ({d})", "vector_cosine_ops", "remem_vectors_hnsw"),
    "inner_product": ("<#>", "-({d})", "vector_ip_ops", "remem_vectors_hnsw_ip"),
    "l2": ("<->", "-({d})", "vector_l2_ops", "remem_vectors_hnsw_l2"),
}


class PostgresDialect(_rows.Dialect):
    name = "postgres"

    def __init__(self, vector_kind: str = "exact", keyword_budget: int = 2000) -> None:
        super().__init__(keyword_budget)
        self.vector_kind = vector_kind

    def q(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def ids_condition(self, col: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
        return f"{col} = ANY(?)", [[int(i) for i in ids]]

    def filter_condition(self, key: str, kind: str, value: Any) -> tuple[str, list[Any]]:
        if kind == "str":
            return "(jsonb_typeof(i.doc -> ?) = 'string' AND i.doc ->> ? = ?)", [key, key, value]
        return (
            "((CASE jsonb_typeof(i.doc -> ?) WHEN 'number' THEN (i.doc ->> ?)::numeric "
            "WHEN 'boolean' THEN ((i.doc ->> ?)::boolean)::int::numeric END) = ?::numeric)",
            [key, key, key, value],
        )

    def upsert_parts(self) -> tuple[str, list[str], str]:
        return (
            "ns_id, key, value, doc, created_at, updated_at, expires_at, ttl_minutes",
            ["?", "?", "?", "?::jsonb", "?", "?", "?", "?"],
            "ON CONFLICT (ns_id, key) DO UPDATE SET value = EXCLUDED.value, doc = EXCLUDED.doc, "
            "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, ttl_minutes = EXCLUDED.ttl_minutes",
        )

    def keyword_replace(self, items: Sequence[tuple[int, dict[str, int]]]) -> Statement:
        # the new rows as arrays; "changed": items whose stored words differ (read after their upsert took
        # the row lock, see write_ops); the removed and the upserted (term, item) pairs never overlap
        terms, docs = STORE_TERMS_TABLE, STORE_TERM_DOCS_TABLE
        rows = [(i, t, n, sum(words.values())) for i, words in items for t, n in sorted(words.items())]
        sql = (
            "WITH w(item_id, term, tf, dl) AS (SELECT * FROM unnest(?::bigint[], ?::text[], ?::int[], ?::int[])), "
            "n(item_id, dl, terms) AS (SELECT * FROM unnest(?::bigint[], ?::int[], ?::text[])), "
            f"changed AS (SELECT n.* FROM n LEFT JOIN {docs} d ON d.item_id = n.item_id "
            "WHERE d.terms IS DISTINCT FROM n.terms), "
            f"gone AS (DELETE FROM {terms} t USING changed c WHERE t.item_id = c.item_id AND NOT EXISTS "
            '(SELECT 1 FROM w WHERE w.item_id = t.item_id AND t.term COLLATE "C" = w.term)), '
            f"put AS (INSERT INTO {terms} (term, item_id, tf, dl) SELECT w.term, w.item_id, w.tf, w.dl "
            "FROM w JOIN changed c ON c.item_id = w.item_id "
            "ON CONFLICT (term, item_id) DO UPDATE SET tf = excluded.tf, dl = excluded.dl), "
            f"doc AS (INSERT INTO {docs} (item_id, dl, terms) SELECT item_id, dl, terms FROM changed "
            "ON CONFLICT (item_id) DO UPDATE SET dl = excluded.dl, terms = excluded.terms RETURNING 1) "
            "SELECT count(*) FROM doc"
        )
        columns: list[Any] = [list(c) for c in zip(*rows, strict=True)] if rows else [[], [], [], []]
        columns += [
            [i for i, _ in items],
            [sum(words.values()) for _, words in items],
            [kw.encode(words) for _, words in items],
        ]
        return Statement(self.q(sql), columns)

    def upsert_params(
        self, ns_id: int, key: str, value: dict[str, Any], text: str, now: float, ttl: float | None
    ) -> list[Any]:
        exact = core.dumps(value)
        doc = exact if "\\u0000" not in exact else core.dumps(core.sanitized(value))
        return [ns_id, key, exact, doc, now, now, core.expiry(ttl, now), ttl]

    def vector_param(self, vec: Any) -> Any:
        if self.vector_kind == "pgvector":
            return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vec, dtype=np.float32).tolist()) + "]"
        return np.asarray(vec, dtype=np.float32).tobytes()


class PostgresVectors:
    """Vector search on Postgres, as statements: pgvector's HNSW index, or the exact NumPy path over the
    process's matrix of the namespaces searched (``cache``, :mod:`remem.store._vector_cache`)."""

    def __init__(
        self, plan: IndexPlan | None, dialect: PostgresDialect, ef_search: int, cache: RunCache | None = None
    ) -> None:
        self.plan, self.dialect, self.ef_search, self.cache = plan, dialect, ef_search, cache

    def search(
        self, query: Vector, k: int, ns_ids: list[int] | None, item_ids: list[int] | None
    ) -> Program[Hits]:
        plan = self.plan
        assert plan is not None
        if self.dialect.vector_kind == "exact":
            assert self.cache is not None
            return (yield from self.cache.search(query, k, ns_ids, item_ids))
        where, params = [], list[Any]()
        if ns_ids is not None:
            where.append("ns_id = ANY(%s)")
            params.append(ns_ids)
        if item_ids is not None:
            where.append("item_id = ANY(%s)")
            params.append(item_ids)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        deep = k * 4
        op, score, _, _ = PGVECTOR[plan.distance]
        yield Statement(f"SET LOCAL hnsw.ef_search = {int(min(1000, max(self.ef_search, deep)))}", (), "none")
        yield Statement("SET LOCAL hnsw.iterative_scan = relaxed_order", (), "none")
        q = self.dialect.vector_param(query)
        distance = f"embedding {op} %s::vector"
        rows = yield Statement(
            f"SELECT item_id, {score.format(d=distance)} FROM {VECTORS} {clause} ORDER BY {distance} LIMIT %s",
            [q, *params, q, deep],
        )
        best: dict[int, float] = {}
        for item_id, value in sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda p: -p[1]):
            best.setdefault(item_id, value)
        return list(best.items())[:k]


def vector_column() -> Program[str]:
    """The type of ``remem_vectors.embedding`` (``bytea`` or ``vector(n)``; empty if there is no table)."""
    row = yield Statement(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        f"WHERE attrelid = to_regclass('{VECTORS}') AND attname = 'embedding'"
    )
    return str(row[0][0]) if row else ""
