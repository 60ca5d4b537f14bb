"""Postgres stores: keyword search (``remem.store._keyword``) and pgvector with an HNSW index where it is installed.

    from remem.store import PostgresStore
    with PostgresStore.from_conn_string("postgresql://...", index={"dims": 384, "embed": embedder}) as store:
        store.hybrid_search(("users", "u1"), "where does the user live?")

On a server without pgvector (Debian's PostgreSQL 15 has none) vectors are stored as float32 ``bytea`` and
searched with NumPy in a matrix the process keeps of the namespaces it searched, read again only after
another writer changed one (:mod:`remem.store._vector_cache`); with pgvector they are ``vector(dims)``
columns under an HNSW index (cosine), queried with ``hnsw.iterative_scan`` so that filters keep recall.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from langgraph.store.base import IndexConfig, Op, Result, TTLConfig

from remem import _migrate
from remem._lease import LeaseTarget, close_idle_connections, retain_idle_connections
from remem._secrets import mask_secrets
from remem._statements import AExecute, Execute, Retry, adrive, aexecute, drive, execute
from remem._url import display_url
from remem.errors import ConfigError, MissingDependencyError, StorageError
from remem.layout import STORE_TABLES
from remem.store._schema import VECTORS

try:
    import psycopg
    from psycopg.rows import tuple_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError:  # pragma: no cover - the dev environment has the extra
    raise MissingDependencyError.for_extra("psycopg", "postgres") from None
from remem.store import _delete, _embedder, _search, _write
from remem.store import _schema as schema
from remem.store._async import AsyncStore
from remem.store._base import (
    Fence,
    RememStoreBase,
    SyncStore,
    check_read_only_schema,
)
from remem.store._core import ScoredItem, SearchMode
from remem.store._delete import DeleteReport
from remem.store._exec import Program, Rows, Statement, Tx
from remem.store._postgres_open import AsyncConn, aconnect, aopened, connect, opened
from remem.store._postgres_sql import PGVECTOR, PostgresDialect, PostgresVectors, vector_column
from remem.store._vector_cache import VectorCache

__all__ = ["AsyncPostgresStore", "PostgresStore"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _PostgresBackend(RememStoreBase):
    """What :class:`PostgresStore` and :class:`AsyncPostgresStore` share: everything but their lifecycle API.

    ``conn`` is a psycopg ``Connection`` (autocommit, any row factory) or a ``ConnectionPool``, as for
    LangGraph's ``PostgresStore``; ``pipe`` a pipeline of that connection. A store opened by
    :meth:`from_conn_string` reconnects by itself after the server restarts (a pool drops a connection the
    server closed as it hands it out, without a round trip; a single connection is reopened), and retries the call once: every store call is safe to
    repeat (puts are upserts, deletes and erasures idempotent).
    """

    MIGRATIONS: ClassVar[list[str]] = schema.statements("postgres")
    """The schema statements, in order (LangGraph's stores expose theirs under this name)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any] | ConnectionPool[Any] | None,
        *,
        pipe: psycopg.Pipeline | None = None,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        ef_search: int = 200,
        keyword_budget: int = 2000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(index=index, ttl=ttl, search_mode=search_mode, clock=clock)
        if pipe is not None and isinstance(conn, ConnectionPool):
            raise ConfigError("pipe= needs a single connection, not a pool; pass the pipeline's connection")
        self._sync_conn = conn
        self.pipe = pipe
        self.dialect = PostgresDialect(keyword_budget=keyword_budget)
        self.ef_search = ef_search
        self.keyword_budget = keyword_budget
        self._is_setup = False
        self._dsn: str | None = None  # set by from_conn_string: the store may reconnect on its own
        self.retry = Retry(self._sync_reopens, "the PostgreSQL connection was lost")
        self.shares_reads = pipe is None  # a pipeline's statements are already sent without waiting
        # the exact path's in-process matrix (a server without pgvector), kept by schema v7's counts
        self._vector_cache = VectorCache(self.plan) if self.plan is not None else None

    def _sync_reopens(self, exc: BaseException) -> bool:
        """Whether a sync call may run again: it lost a connection the store opened itself (or a pool's);
        the caller's own connection is theirs to reopen."""
        pool = self._sync_conn if isinstance(self._sync_conn, ConnectionPool) else None
        lost = (self._dsn is not None or pool is not None) and _connection_lost(exc)
        if lost and pool is not None:  # a restart broke every idle connection: drop them before the retry
            with contextlib.suppress(Exception):
                pool.check()
        return lost

    @property
    def vector_kind(self) -> str:
        """``"pgvector"`` (HNSW index) or ``"exact"`` (float32 bytea searched with NumPy)."""
        return self._pg.vector_kind

    @property
    def _pg(self) -> PostgresDialect:
        assert isinstance(self.dialect, PostgresDialect)
        return self.dialect

    def _setup_now(self) -> None:
        with self._lock:
            if self._is_setup:
                return
            try:
                with self._connection() as conn:
                    self._setup(conn)
            except psycopg.Error as exc:
                raise StorageError(
                    f"setting up the store's tables failed: {mask_secrets(str(exc))}; check the database"
                ) from exc
            self._is_setup = True

    def _where(self) -> str:
        return display_url(self._dsn) if self._dsn else "the PostgreSQL database"

    def _setup(self, c: psycopg.Connection[Any]) -> None:
        has_vector = False
        if self.plan is not None and not self.read_only:
            try:
                with c.transaction():
                    c.execute("CREATE EXTENSION IF NOT EXISTS vector")
                has_vector = True
            except psycopg.Error:
                has_vector = False  # no pgvector here: the exact path
        with c.transaction():
            drive(self._setup_program(has_vector), functools.partial(self._execute, c))

    def _setup_program(self, has_vector: bool) -> Program[None]:
        """Migrate (or, read-only, check) the tables and choose the vector path, in one transaction; the
        sync and async setups run it after trying ``CREATE EXTENSION vector`` on their own."""
        if self.read_only:  # check, create nothing (the server refuses writes too)
            version = yield from (_migrate.check(schema.COMPONENT, "postgres"))
            check_read_only_schema(version, self._where())
            kind = yield from vector_column()
            self.dialect = PostgresDialect(
                "pgvector" if kind.startswith("vector") else "exact", keyword_budget=self.keyword_budget
            )
            if self.plan is not None:
                yield from _embedder.open_program(self.dialect, self.plan, True, self._where())
            return
        # the runner takes remem's advisory lock first: the pgvector choice below is made under it too
        yield from (_migrate.upgrade(schema.COMPONENT, "postgres"))
        if has_vector and self.plan is not None:
            yield from (_migrate.upgrade(schema.pgvector(self.plan.dims), "postgres"))
        kind = yield from vector_column()
        if kind.startswith("vector") and self.plan is not None:
            _, _, ops, name = PGVECTOR[self.plan.distance]
            yield Statement(
                f"CREATE INDEX IF NOT EXISTS {name} ON {VECTORS} USING hnsw (embedding {ops})", (), "none"
            )
        self.dialect = PostgresDialect(
            "pgvector" if kind.startswith("vector") else "exact", keyword_budget=self.keyword_budget
        )
        yield from _write.reindex_program(self.dialect)
        if self.plan is not None:
            yield from _embedder.open_program(self.dialect, self.plan, False, self._where())

    # -------------------------------------------------- connections

    def _serial(self) -> contextlib.AbstractContextManager[Any]:
        """On a pool, sync calls run side by side, each transaction on a connection of its own (the
        thread leases never depend on it: each lease has its own session, see :mod:`remem._lease`)."""
        return contextlib.nullcontext() if isinstance(self._sync_conn, ConnectionPool) else self._lock

    def _sync_dsn(self) -> str:
        """Where a sync connection the store opens itself goes (a store given its connection has none)."""
        if self._dsn is None:
            raise ConfigError("this store was given no connection to use; open it with from_conn_string")
        return self._dsn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        source = self._sync_conn
        if isinstance(source, ConnectionPool):
            with source.connection() as conn:
                yield conn
            return
        if source is None or ((source.closed or source.broken) and self._dsn is not None):
            # the server went away and came back (or the first sync call of an async store): a new session
            source = self._sync_conn = connect(self._sync_dsn(), self.read_only)
        yield source

    def _cursor(self, *, pipeline: bool = False) -> contextlib.AbstractContextManager[psycopg.Cursor[Any]]:
        """A cursor on the store's connection, as LangGraph's store has one (its test helpers use it); the
        tables are remem's (``remem_items``, ``remem_ns``, ``remem_vectors``), not LangGraph's ``store``.
        ``pipeline`` is accepted as LangGraph spells it; the cursor runs each statement as it comes."""
        return self._sync_cursor()

    @contextlib.contextmanager
    def _sync_cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._lock, self._connection() as conn, conn.cursor() as cur:
            yield cur

    # -------------------------------------------------- I/O hooks

    @contextlib.contextmanager
    def _transaction(self, write: bool, snapshot: bool = True) -> Iterator[Execute]:
        if not self._is_setup:
            self._setup_now()
        try:
            with self._connection() as conn:
                # an autocommit read with no snapshot to share runs each statement alone: no BEGIN, no COMMIT
                alone = not write and not snapshot and conn.autocommit and self.pipe is None
                with contextlib.nullcontext() if alone else conn.transaction():
                    yield functools.partial(self._execute, conn)
        except psycopg.Error as exc:
            raise StorageError(
                f"PostgreSQL refused the work: {mask_secrets(str(exc))}; check the server and the database"
            ) from exc

    def _execute(self, conn: psycopg.Connection[Any], request: Statement) -> Rows:
        with conn.cursor(row_factory=tuple_row) as cur:
            return execute(cur, request, self.pipe.sync if self.pipe is not None else None)

    def _vectors(self) -> PostgresVectors:
        assert isinstance(self.dialect, PostgresDialect)
        cache = self._vector_cache.run() if self._vector_cache and self.vector_kind == "exact" else None
        return PostgresVectors(self.plan, self.dialect, self.ef_search, cache)

    def _in_transaction(self, program: Program[T], tx: Tx) -> Program[T]:
        result = yield from program
        if tx.changes and isinstance(tx.vectors, PostgresVectors) and tx.vectors.cache is not None:
            yield from tx.vectors.cache.finishing(tx.changes)
        return result

    def _vectors_changed(self, tx: Tx) -> None:
        if isinstance(tx.vectors, PostgresVectors) and tx.vectors.cache is not None:
            tx.vectors.cache.committed(tx.changes)

    def _compact(self) -> bool:
        try:
            with self._connection() as conn:
                for table in STORE_TABLES:
                    conn.execute(f"VACUUM {table}")
        except psycopg.Error as exc:
            raise StorageError(
                f"the data was deleted but VACUUM failed: {exc}; run VACUUM on the remem_ tables"
            ) from exc
        return True


def _connection_lost(exc: BaseException) -> bool:
    """Whether a call failed because the server went away (then a new connection may succeed)."""
    if not isinstance(exc, StorageError):
        return False
    cause = exc.__cause__
    return isinstance(cause, psycopg.OperationalError) and not isinstance(cause, psycopg.errors.QueryCanceled)


class PostgresStore(_PostgresBackend, SyncStore):
    """A LangGraph ``BaseStore`` on PostgreSQL with full-text, vector (pgvector HNSW or exact) and hybrid search."""

    def __init__(self, conn: psycopg.Connection[Any] | ConnectionPool[Any], **options: Any) -> None:
        super().__init__(conn, **options)

    @property
    def conn(self) -> psycopg.Connection[Any] | ConnectionPool[Any]:
        """The connection or pool the store runs on (a lost connection is replaced by a new one)."""
        assert self._sync_conn is not None
        return self._sync_conn

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.psycopg(self.conn)

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_config: Mapping[str, Any] | None = None,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        read_only: bool = False,
        **options: Any,
    ) -> Iterator[PostgresStore]:
        """Connect to ``conn_string`` (a pool with ``pool_config``, a pipeline with ``pipeline=True``), set
        the tables up, and close the connection on exit.

        ``read_only=True`` (for commands that only read): the session is read-only on the server, nothing
        is created, and missing tables raise :class:`~remem.errors.NotFoundError`."""
        with opened(conn_string, pipeline, pool_config, read_only) as (conn, pipe, dsn):
            store = cls(conn, pipe=pipe, index=index, ttl=ttl, search_mode=search_mode, **options)
            store._dsn = dsn
            store.read_only = read_only
            retain_idle_connections(store.lease_target)
            try:
                store._setup_now()
                yield store
            finally:
                store.stop_ttl_sweeper(1)
                close_idle_connections(store.lease_target)  # the memory client's thread leases


class _Cursors:
    """What :meth:`AsyncPostgresStore._cursor` returns: a context manager both ways, since stock code uses
    ``async with`` and remem's own helpers (shared with the sync store) use ``with``. Each entry opens its
    own cursor, so one object entered both ways at once still closes each."""

    def __init__(self, store: AsyncPostgresStore) -> None:
        self._store = store
        self._sync: list[contextlib.AbstractContextManager[psycopg.Cursor[Any]]] = []
        self._async: list[contextlib.AbstractAsyncContextManager[psycopg.AsyncCursor[Any]]] = []

    def __enter__(self) -> psycopg.Cursor[Any]:
        opened = self._store._sync_cursor()
        cur = opened.__enter__()
        self._sync.append(opened)
        return cur

    def __exit__(self, *exc: Any) -> bool | None:
        return self._sync.pop().__exit__(*exc)

    async def __aenter__(self) -> psycopg.AsyncCursor[Any]:
        opened = self._store._async_cursor()
        cur = await opened.__aenter__()
        self._async.append(opened)
        return cur

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._async.pop().__aexit__(*exc)


class AsyncPostgresStore(_PostgresBackend, AsyncStore):
    """Async version of :class:`PostgresStore`, on psycopg's ``AsyncConnection`` or ``AsyncConnectionPool``.

    ``abatch`` calls made concurrently run together in one transaction; the embedder runs in a worker
    thread. Sync calls (from any thread, the loop's own included, where LangGraph's store raises) run over
    a sync connection the store opens to the same database on first use: measured on LangGraph's own
    large-batch test, that cost half the CPU of sending them through the event loop.
    """

    def __init__(
        self,
        conn: AsyncConn | AsyncConnectionPool[Any],
        *,
        pipe: psycopg.AsyncPipeline | None = None,
        **options: Any,
    ) -> None:
        super().__init__(None, **options)
        if pipe is not None and isinstance(conn, AsyncConnectionPool):
            raise ConfigError("pipe= needs a single connection, not a pool; pass the pipeline's connection")
        self.conn = conn
        self.apipe = pipe
        self._alock: asyncio.Lock | None = None
        self.aretry = Retry(self._async_reopens, "the PostgreSQL connection was lost")

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.psycopg(self.conn)

    def _async_reopens(self, exc: BaseException) -> bool:
        """Async version of :meth:`_sync_reopens`."""
        return (self._dsn is not None or isinstance(self.conn, AsyncConnectionPool)) and _connection_lost(exc)

    # -------------------------------------------------- sync calls

    def _sync_dsn(self) -> str:
        if self._dsn is not None:
            return self._dsn
        if isinstance(self.conn, AsyncConnectionPool):
            return str(self.conn.conninfo)
        info = self.conn.info  # its dsn leaves the password out
        return psycopg.conninfo.make_conninfo(info.dsn, password=info.password)

    def _close_sync(self) -> None:
        source, self._sync_conn = self._sync_conn, None
        if source is not None:
            source.close()

    def _cursor(self, *, pipeline: bool = False) -> _Cursors:
        """A cursor as stock ``AsyncPostgresStore._cursor`` gives one (LangGraph's async test helpers run
        ``async with store._cursor()``): ``async with`` gives an async cursor on the store's async
        connection, ``with`` a sync cursor on its sync one (as :meth:`PostgresStore._cursor`)."""
        return _Cursors(self)

    @contextlib.asynccontextmanager
    async def _async_cursor(self) -> AsyncIterator[psycopg.AsyncCursor[Any]]:
        async with self._async_lock(), self._aconnection() as conn, conn.cursor() as cur:
            yield cur

    # -------------------------------------------------- the async driver

    def _async_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """One transaction at a time on a single connection; a pool hands each its own."""
        if isinstance(self.conn, AsyncConnectionPool):
            return contextlib.nullcontext()
        if self._alock is None:
            self._alock = asyncio.Lock()
        return self._alock

    @contextlib.asynccontextmanager
    async def _aconnection(self) -> AsyncIterator[AsyncConn]:
        if isinstance(self.conn, AsyncConnectionPool):
            async with self.conn.connection() as conn:
                yield conn
            return
        if (self.conn.closed or self.conn.broken) and self._dsn is not None:
            # the server went away and came back: a new session (outside the pipeline it was opened with)
            self.conn, self.apipe = await aconnect(self._dsn, self.read_only), None
        yield self.conn

    @contextlib.asynccontextmanager
    async def _atransaction(self, write: bool, snapshot: bool = True) -> AsyncIterator[AExecute]:
        """Async version of :meth:`_transaction`."""
        if not self._is_setup:
            await self.setup()
        try:
            async with self._aconnection() as conn, contextlib.AsyncExitStack() as stack:
                if write or snapshot or not conn.autocommit or self.apipe is not None:
                    await stack.enter_async_context(conn.transaction())
                yield functools.partial(self._aexecute, conn)
        except psycopg.Error as exc:
            raise StorageError(
                f"PostgreSQL refused the work: {mask_secrets(str(exc))}; check the server and the database"
            ) from exc

    async def _aexecute(self, conn: AsyncConn, request: Statement) -> Rows:
        """Async version of :meth:`_execute`."""
        async with conn.cursor(row_factory=tuple_row) as cur:
            return await aexecute(cur, request, self.apipe.sync if self.apipe is not None else None)

    # -------------------------------------------------- async API

    async def _abatch_now(self, ops: list[Op]) -> list[Result]:
        return await self._abatch_native(ops)

    async def afenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]:
        return await self._abatch_native(list(ops), fence)

    async def setup(self) -> None:
        """Async version of :meth:`PostgresStore.setup`."""
        if self._is_setup:
            return
        try:
            async with self._aconnection() as c:
                has_vector = False
                if self.plan is not None and not self.read_only:
                    try:
                        async with c.transaction():
                            await c.execute("CREATE EXTENSION IF NOT EXISTS vector")
                        has_vector = True
                    except psycopg.Error:
                        has_vector = False  # no pgvector here: the exact path
                async with c.transaction():
                    await adrive(self._setup_program(has_vector), functools.partial(self._aexecute, c))
        except psycopg.Error as exc:
            raise StorageError(
                f"setting up the store's tables failed: {mask_secrets(str(exc))}; check the database"
            ) from exc
        self._is_setup = True

    async def ahybrid_search(
        self, namespace_prefix: tuple[str, ...], query: str, **kw: Any
    ) -> list[ScoredItem]:
        """Async version of :meth:`hybrid_search`."""
        mode: SearchMode = kw.pop("mode", "hybrid")
        op = self._search_op(namespace_prefix, query, **kw)
        ready = await self._aembed_ahead([op], mode)
        return await self._arun(
            lambda tx: _search.search_program(self.dialect, tx, self.plan, op, mode, self.clock()),
            write=False,
            ready=ready,
        )

    async def _adelete(
        self, make: Callable[[Tx], Program[tuple[DeleteReport, list[str]]]], compact: bool
    ) -> DeleteReport:
        report, values = await self._arun(make, write=True)
        self._evict_texts(values)
        if compact:
            async with self._async_lock():
                report.compacted = await self._acompact()
        return report

    async def _acompact(self) -> bool:
        """Async version of :meth:`_compact`."""
        try:
            async with self._aconnection() as conn:
                for table in STORE_TABLES:
                    await conn.execute(f"VACUUM {table}")
        except psycopg.Error as exc:
            raise StorageError(
                f"the data was deleted but VACUUM failed: {exc}; run VACUUM on the remem_ tables"
            ) from exc
        return True

    async def asweep_ttl(self) -> int:
        return await self._arun(lambda tx: _delete.sweep_program(self.dialect, tx, self.clock()), write=True)

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_config: Mapping[str, Any] | None = None,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        read_only: bool = False,
        **options: Any,
    ) -> AsyncIterator[AsyncPostgresStore]:
        """Async version of :meth:`PostgresStore.from_conn_string`."""
        async with aopened(conn_string, pipeline, pool_config, read_only) as (conn, pipe, dsn):
            store = cls(conn, pipe=pipe, index=index, ttl=ttl, search_mode=search_mode, **options)
            store._dsn = dsn
            store.read_only = read_only
            retain_idle_connections(store.lease_target)
            try:
                await store.setup()
                yield store
            finally:
                await store.stop_ttl_sweeper(1)
                await asyncio.to_thread(store._close_sync)
                await asyncio.to_thread(close_idle_connections, store.lease_target)
