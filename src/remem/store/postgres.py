"""Postgres stores: full-text search (tsvector + GIN) and pgvector with an HNSW index where it is installed.

    from remem.store import PostgresStore
    with PostgresStore.from_conn_string("postgresql://...", index={"dims": 384, "embed": embedder}) as store:
        store.hybrid_search(("users", "u1"), "where does the user live?")

On a server without pgvector (Debian's PostgreSQL 15 has none) vectors are stored as float32 ``bytea`` and
searched exactly with NumPy over the rows of the namespace asked for; with pgvector they are ``vector(dims)``
columns under an HNSW index (cosine), queried with ``hnsw.iterative_scan`` so that filters keep recall.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from langgraph.store.base import IndexConfig, TTLConfig

from remem._secrets import mask_secrets
from remem._url import display_url, parse_database_url
from remem.errors import ConfigError, MissingDependencyError, StorageError

try:
    import psycopg
except ImportError:  # pragma: no cover - psycopg is a dependency; this names the fix if it goes missing
    raise MissingDependencyError(
        "psycopg is not installed; install it with: pip install 'psycopg[binary]'"
    ) from None
from remem.store import _core as core
from remem.store import _program as prog
from remem.store._base import RememStoreBase
from remem.store._core import SearchMode

__all__ = ["AsyncPostgresStore", "PostgresStore"]

_LOCK_ID = 0x72656D656D  # "remem": serialises migrations across processes

MIGRATIONS: list[list[str]] = [
    [
        'CREATE TABLE remem_ns (id bigserial PRIMARY KEY, path text COLLATE "C" NOT NULL UNIQUE, depth int NOT NULL)',
        "CREATE TABLE remem_items (id bigserial PRIMARY KEY, ns_id bigint NOT NULL, key text NOT NULL, "
        "value text NOT NULL, doc jsonb NOT NULL, tsv tsvector NOT NULL, created_at double precision NOT NULL, "
        "updated_at double precision NOT NULL, expires_at double precision, ttl_minutes double precision, "
        "UNIQUE (ns_id, key))",
        "CREATE INDEX remem_items_tsv ON remem_items USING gin (tsv)",
        "CREATE INDEX remem_items_expires ON remem_items (expires_at) WHERE expires_at IS NOT NULL",
    ],
]


class PostgresDialect(prog.Dialect):
    name = "postgres"

    def __init__(self, vector_kind: str = "exact") -> None:
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
            "ns_id, key, value, doc, tsv, created_at, updated_at, expires_at, ttl_minutes",
            ["?", "?", "?", "?::jsonb", "to_tsvector('english', ?)", "?", "?", "?", "?"],
            "ON CONFLICT (ns_id, key) DO UPDATE SET value = EXCLUDED.value, doc = EXCLUDED.doc, tsv = EXCLUDED.tsv, "
            "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, ttl_minutes = EXCLUDED.ttl_minutes",
        )

    def upsert_params(
        self, ns_id: int, key: str, value: dict[str, Any], text: str, now: float, ttl: float | None
    ) -> list[Any]:
        exact = core.dumps(value)
        doc = exact if "\\u0000" not in exact else core.dumps(core.sanitized(value))
        return [ns_id, key, exact, doc, text[:500_000], now, now, core.expiry(ttl, now), ttl]

    def vector_param(self, vec: Any) -> Any:
        if self.vector_kind == "pgvector":
            return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vec, dtype=np.float32).tolist()) + "]"
        return np.asarray(vec, dtype=np.float32).tobytes()


class PostgresStore(RememStoreBase):
    """A LangGraph ``BaseStore`` on PostgreSQL with full-text, vector (pgvector HNSW or exact) and hybrid search."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        ef_search: int = 200,
        keyword_budget: int = 2000,
    ) -> None:
        super().__init__(index=index, ttl=ttl, search_mode=search_mode)
        self.conn = conn
        self.dialect = PostgresDialect()
        self.ef_search = ef_search
        self.keyword_budget = keyword_budget
        self._df: dict[str, tuple[int, int]] = {}  # term -> (items containing it, table size then)
        self._is_setup = False

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        **options: Any,
    ) -> Iterator[PostgresStore]:
        """Connect to ``conn_string``, set the tables up, and close the connection on exit."""
        conn = _connect(conn_string)
        store: PostgresStore | None = None
        try:
            store = cls(conn, index=index, ttl=ttl, search_mode=search_mode, **options)
            store.setup()
            yield store
        finally:
            if store is not None:
                store.stop_ttl_sweeper(1)
            conn.close()

    @property
    def vector_kind(self) -> str:
        """``"pgvector"`` (HNSW index) or ``"exact"`` (float32 bytea searched with NumPy)."""
        return self.dialect.vector_kind  # type: ignore[attr-defined, no-any-return]

    def setup(self) -> None:
        """Create or migrate the tables (idempotent; an advisory lock serialises concurrent processes)."""
        with self._lock:
            if self._is_setup:
                return
            try:
                self._setup()
            except psycopg.Error as exc:
                raise StorageError(
                    f"setting up the store's tables failed: {exc}; check the database"
                ) from exc
            self._is_setup = True

    def _setup(self) -> None:
        c = self.conn
        has_vector = False
        if self.plan is not None:
            try:
                with c.transaction():
                    c.execute("CREATE EXTENSION IF NOT EXISTS vector")
                has_vector = True
            except psycopg.Error:
                has_vector = False  # no pgvector here: the exact path
        with c.transaction():
            c.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_ID])
            c.execute(
                "CREATE TABLE IF NOT EXISTS remem_store_migrations (v int PRIMARY KEY, applied_at double precision)"
            )
            done = {r[0] for r in c.execute("SELECT v FROM remem_store_migrations").fetchall()}
            for version, statements in enumerate(MIGRATIONS):
                if version not in done:
                    for statement in statements:
                        c.execute(statement)
                    c.execute("INSERT INTO remem_store_migrations VALUES (%s, %s)", [version, time.time()])
            row = c.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass('remem_vectors') AND attname = 'embedding'"
            ).fetchone()
            if row is None:
                column = f"vector({self.plan.dims})" if has_vector and self.plan else "bytea"
                c.execute(
                    "CREATE TABLE remem_vectors (item_id bigint NOT NULL, ns_id bigint NOT NULL, path text NOT NULL, "
                    f"text_hash bytea NOT NULL, embedding {column} NOT NULL, PRIMARY KEY (item_id, path))"
                )
                c.execute("CREATE INDEX remem_vectors_ns ON remem_vectors (ns_id)")
                if column.startswith("vector"):
                    c.execute(
                        "CREATE INDEX remem_vectors_hnsw ON remem_vectors USING hnsw (embedding vector_cosine_ops)"
                    )
                kind = column
            else:
                kind = row[0]
        self.dialect = PostgresDialect("pgvector" if kind.startswith("vector") else "exact")

    # -------------------------------------------------- I/O hooks

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[None]:
        if not self._is_setup:
            self.setup()
        try:
            with self.conn.transaction():
                yield
        except psycopg.Error as exc:
            raise StorageError(
                f"PostgreSQL refused the work: {exc}; check the server and the database"
            ) from exc

    def _execute(self, request: prog.Sql | prog.Many) -> Any:
        if isinstance(request, prog.Many):
            if len(request.rows) == 1:  # one row: a plain execute saves the pipeline's round trips
                self.conn.execute(request.sql, request.rows[0])
            elif request.rows:
                with self.conn.cursor() as cur:
                    cur.executemany(request.sql, request.rows)
            return None
        cur = self.conn.execute(request.sql, list(request.params))
        return cur.fetchall() if request.fetch else cur.rowcount

    def _keyword_search(self, request: prog.KwSearch) -> list[tuple[int, float]]:
        row = self.conn.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = 'remem_items'::regclass"
        ).fetchone()
        rows = int(row[0]) if row else -1
        if rows < 0:  # never analysed: count once (the planner's estimate is used afterwards)
            counted = self.conn.execute("SELECT count(*) FROM remem_items").fetchone()
            rows = int(counted[0]) if counted else 0
        df = None if rows <= self.keyword_budget else {t: self._doc_frequency(t, rows) for t in request.terms}
        newest: int | None = None
        for attempt in core.plan_keyword(request.terms, df, rows, self.keyword_budget):
            lowest = None
            if attempt.newest is not None:
                if newest is None:
                    found_max = self.conn.execute("SELECT coalesce(max(id), 0) FROM remem_items").fetchone()
                    newest = int(found_max[0]) if found_max else 0
                lowest = newest - attempt.newest
            found = self._ranked((" & " if attempt.every else " | ").join(attempt.terms), lowest, request)
            if found and (attempt.partial or len(found) >= request.k):
                return found
        return []

    def _doc_frequency(self, term: str, rows: int) -> int:
        cached = self._df.get(term)
        if cached is not None and abs(cached[1] - rows) <= rows // 10:
            return cached[0]
        found = self.conn.execute(
            "SELECT count(*) FROM remem_items WHERE tsv @@ to_tsquery('english', %s)", [term]
        ).fetchone()
        count = int(found[0]) if found else 0
        if len(self._df) > 50_000:
            self._df.clear()
        self._df[term] = (count, rows)
        return count

    def _ranked(self, tsquery: str, lowest: int | None, request: prog.KwSearch) -> list[tuple[int, float]]:
        where = ["i.tsv @@ tq.q", "(i.expires_at IS NULL OR i.expires_at > %s)"]
        params: list[Any] = [tsquery, request.now]
        if lowest is not None:
            where.append("i.id > %s")
            params.append(lowest)
        if request.ns_ids is not None:
            where.append("i.ns_id = ANY(%s)")
            params.append(request.ns_ids)
        if request.item_ids is not None:
            where.append("i.id = ANY(%s)")
            params.append(request.item_ids)
        rows = self.conn.execute(
            "SELECT i.id, ts_rank(i.tsv, tq.q) AS s FROM remem_items i, to_tsquery('english', %s) AS tq(q) "
            f"WHERE {' AND '.join(where)} ORDER BY s DESC, i.id LIMIT %s",
            [*params, request.k],
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def _vector_search(self, request: prog.VecSearch) -> list[tuple[int, float]]:
        where, params = [], []
        if request.ns_ids is not None:
            where.append("ns_id = %s")
            params.append(request.ns_ids)
            where[-1] = "ns_id = ANY(%s)"
        if request.item_ids is not None:
            where.append("item_id = ANY(%s)")
            params.append(request.item_ids)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        k = request.k * 4
        if self.vector_kind == "pgvector":
            self.conn.execute(f"SET LOCAL hnsw.ef_search = {int(min(1000, max(self.ef_search, k)))}")
            self.conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            q = self.dialect.vector_param(request.query)
            rows = self.conn.execute(
                f"SELECT item_id, 1 - (embedding <=> %s::vector) FROM remem_vectors {clause} "
                "ORDER BY embedding <=> %s::vector LIMIT %s",
                [q, *params, q, k],
            ).fetchall()
            pairs = sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda p: -p[1])
        else:
            rows = self.conn.execute(
                f"SELECT item_id, embedding FROM remem_vectors {clause}", params
            ).fetchall()
            if not rows:
                return []
            matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32).reshape(
                len(rows), -1
            )
            scores = matrix @ request.query.astype(np.float32)
            order = np.argsort(-scores, kind="stable")[:k]
            pairs = [(int(rows[i][0]), float(scores[i])) for i in order.tolist()]
        best: dict[int, float] = {}
        for item_id, score in pairs:
            best.setdefault(item_id, score)
        return list(best.items())[: request.k]

    def _compact(self) -> bool:
        try:
            for table in ("remem_items", "remem_vectors", "remem_ns"):
                self.conn.execute(f"VACUUM {table}")
        except psycopg.Error as exc:
            raise StorageError(
                f"the data was deleted but VACUUM failed: {exc}; run VACUUM on the remem_ tables"
            ) from exc
        return True


def _dsn(conn_string: str) -> str:
    parsed = parse_database_url(conn_string)
    if parsed.kind != "postgres":
        raise ConfigError(
            f"{display_url(conn_string)} is not a PostgreSQL URL; open it with SqliteStore (or open_store)"
        )
    return parsed.target


def _connect(conn_string: str) -> psycopg.Connection[Any]:
    dsn = _dsn(conn_string)
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot connect to PostgreSQL: {mask_secrets(str(exc))}; check the URL and that the server is up"
        ) from exc


class AsyncPostgresStore(PostgresStore):
    """Async version of :class:`PostgresStore`: the same store, each batch run in a worker thread."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls,
        conn_string: str,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        **options: Any,
    ) -> AsyncIterator[AsyncPostgresStore]:
        """Async version of :meth:`PostgresStore.from_conn_string`."""
        conn = await asyncio.to_thread(_connect, conn_string)
        try:
            store = cls(conn, index=index, ttl=ttl, search_mode=search_mode, **options)
            await asyncio.to_thread(store.setup)
            yield store
        finally:
            await asyncio.to_thread(conn.close)
