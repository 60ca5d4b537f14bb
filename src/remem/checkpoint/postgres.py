"""remem's checkpointers on PostgreSQL: :class:`PostgresSaver` and :class:`AsyncPostgresSaver` (psycopg 3).

Each operation borrows a connection from a ``psycopg_pool`` pool for one transaction, so a saver shared
by many threads or tasks runs their queries in parallel; writes to one thread are ordered by a lock on
that thread's row only. Reads run in a ``REPEATABLE READ`` read-only transaction, so a checkpoint and
the values it references are read from one snapshot.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any

from remem import _pgpool
from remem._lease import LeaseTarget, close_idle_connections, retain_idle_connections
from remem._secrets import mask_secrets
from remem._statements import AExecute, Execute, aexecute, apipelined, execute, pipelined
from remem._url import describe_postgres, parse_database_url
from remem.checkpoint._async import AsyncSaver
from remem.checkpoint._sql import POSTGRES
from remem.checkpoint._sync import SyncSaver
from remem.errors import ConfigError, MissingDependencyError, StaleCacheError, StorageError

try:
    import psycopg
    from psycopg.rows import tuple_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
    from psycopg_pool.base import AttemptWithBackoff
except ImportError as exc:  # pragma: no cover - the postgres extra is installed in dev
    raise MissingDependencyError.for_extra("psycopg[pool]", "postgres") from exc

__all__ = ["AsyncPostgresSaver", "PostgresSaver"]

_READ_ONLY = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_CONNECT_KWARGS: dict[str, Any] = {"autocommit": True}
_CONNECT_TIMEOUT = 10


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _password(dsn: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    try:
        value = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return str(value) if value else None


def _storage_error(exc: BaseException) -> StorageError:
    from psycopg_pool import PoolClosed

    if isinstance(exc, PoolClosed) or (isinstance(exc, psycopg.OperationalError) and "is closed" in str(exc)):
        from remem._sqlite import closed_error

        return closed_error("PostgreSQL")
    return StorageError(
        f"PostgreSQL refused the checkpoint operation ({mask_secrets(_first_line(exc))}); check that the server "
        "is running, that the URL is right and that the user may create tables (setup() creates them)"
    )


def _dsn(conn_string: str) -> str:
    """``conn_string`` checked by :func:`remem._url.parse_database_url`: a PostgreSQL URL or libpq DSN."""
    parsed = parse_database_url(conn_string)
    if parsed.kind != "postgres":
        raise ConfigError(
            "a PostgreSQL saver needs a postgresql:// URL or a libpq DSN (host=... dbname=...); "
            "for a SQLite file use remem.checkpoint.SqliteSaver"
        )
    describe_postgres(parsed.target)  # a malformed DSN: ConfigError, without echoing it
    return parsed.target


def _unreachable(dsn: str, exc: BaseException) -> StorageError:
    reason = mask_secrets(_first_line(exc), _password(dsn))
    return StorageError(
        f"cannot connect to PostgreSQL at {describe_postgres(dsn)} ({reason}); "
        "check that the server is running and that the URL (REMEM_DATABASE_URL, --db) is right"
    )


def _pool_kwargs(dsn: str, read_only: bool) -> dict[str, Any]:
    kwargs = dict(_CONNECT_KWARGS)
    if read_only:  # the server itself refuses writes
        kwargs["options"] = "-c default_transaction_read_only=on"
    return kwargs


_MAX_RECONNECT_DELAY = 2.0


def _capped(attempt: AttemptWithBackoff | None) -> AttemptWithBackoff | None:
    # psycopg_pool doubles the delay between reconnection attempts without bound: after a 30 s outage the
    # next attempt can be 30 s away, and calls made once the server is back would time out waiting for it.
    if attempt is not None:
        attempt.delay = min(attempt.delay, _MAX_RECONNECT_DELAY / attempt.DELAY_BACKOFF)
    return attempt


class _Pool(ConnectionPool[Any]):
    """The pool ``from_conn_string`` opens: a connection a restart broke is dropped as it is handed out, without
    a round trip (:func:`remem._pgpool.check`); a lost server is retried every 2 s."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(_capped(attempt), growing)


class _AsyncPool(AsyncConnectionPool[Any]):
    """Async version of :class:`_Pool`."""

    async def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        await super()._add_connection(_capped(attempt), growing)


class PostgresSaver(SyncSaver):
    """A LangGraph checkpointer that stores each value of a thread once, in PostgreSQL.

    Example:
        >>> with PostgresSaver.from_conn_string("postgresql://localhost/app") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)

    Give it a ``ConnectionPool`` (preferred: no lock around the saver) or one ``Connection`` (then its
    operations take turns), built with any row factory. ``pipe`` (a ``Pipeline`` of that one connection)
    is accepted as by the stock saver: statements then run in pipeline mode.
    """

    _dialect = POSTGRES

    def __init__(
        self,
        conn: ConnectionPool | psycopg.Connection[Any],
        pipe: psycopg.Pipeline | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(conn, ConnectionPool) and pipe is not None:
            raise ConfigError("pipe= works with a single Connection only, not with a ConnectionPool")
        super().__init__(**kwargs)
        self.conn = conn
        self.pipe = pipe
        self.lock = threading.Lock()

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.psycopg(self.conn)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_size: int = 10,
        read_only: bool = False,
        **kwargs: Any,
    ) -> Iterator[PostgresSaver]:
        """Open a saver on a PostgreSQL URL or DSN, with a pool of up to ``pool_size`` connections; closed on exit.

        A connection the server closed is dropped before use (no round trip), so the saver works again after
        the server restarts.
        ``pipeline=True`` uses one connection in pipeline mode instead, as the stock saver does.
        ``read_only=True``: the server refuses writes and :meth:`setup` only checks the tables.
        """
        dsn = _dsn(conn_string)
        try:  # one plain connection first: it fails fast with the server's reason, where a pool retries
            first = psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT, **_pool_kwargs(dsn, read_only))
        except psycopg.Error as exc:
            raise _unreachable(dsn, exc) from None
        if pipeline:
            with first, first.pipeline() as pipe:
                saver = cls(first, pipe, read_only=read_only, **kwargs)
                saver._where = f"PostgreSQL at {describe_postgres(dsn)}"
                retain_idle_connections(saver.lease_target)
                try:
                    yield saver
                finally:
                    close_idle_connections(saver.lease_target)
            return
        first.close()
        pool = _Pool(
            dsn,
            kwargs=_pool_kwargs(dsn, read_only),
            min_size=1,
            max_size=pool_size,
            open=False,
            check=_pgpool.check,
        )
        try:
            pool.open(wait=True, timeout=_CONNECT_TIMEOUT)
        except Exception as exc:
            pool.close()
            raise _unreachable(dsn, exc) from None
        try:
            saver = cls(pool, read_only=read_only, **kwargs)
            saver._where = f"PostgreSQL at {describe_postgres(dsn)}"
            retain_idle_connections(LeaseTarget.psycopg(pool))
            yield saver
        finally:
            # Stock savers leave no session behind; the thread leases' idle connections go with the pool.
            close_idle_connections(LeaseTarget.psycopg(pool))
            pool.close()

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        if isinstance(self.conn, ConnectionPool):
            return self.conn.connection()
        return self._single()

    @contextmanager
    def _single(self) -> Iterator[psycopg.Connection[Any]]:
        with self.lock:
            yield self.conn  # type: ignore[misc]

    @contextmanager
    def _transaction(self, write: bool, snapshot: bool = True) -> Iterator[Execute]:
        """One transaction; a read (``write`` False) in one ``REPEATABLE READ`` snapshot, or with
        ``snapshot`` False each statement on its own (no BEGIN, no COMMIT: a one-statement read is one
        round trip)."""
        try:
            with self._connection() as conn:
                if not write and conn.autocommit and self.pipe is None:
                    if snapshot:
                        with pipelined(conn, _BEGIN_READ) as run_one:
                            yield run_one
                    else:
                        with conn.cursor(row_factory=tuple_row) as cur:
                            yield functools.partial(execute, cur)
                elif not write:
                    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        cur.execute(_READ_ONLY)
                        yield functools.partial(execute, cur)
                elif conn.autocommit and self.pipe is None:
                    with pipelined(conn) as run_one:
                        yield run_one
                else:
                    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        yield functools.partial(execute, cur)
            if self.pipe is not None:
                self.pipe.sync()
        except psycopg.errors.DivisionByZero as exc:  # only a write's guard divides (_sql.GUARD_THREAD)
            raise StaleCacheError from exc
        except psycopg.Error as exc:
            raise _storage_error(exc) from exc


class AsyncPostgresSaver(AsyncSaver):
    """Async version of :class:`PostgresSaver`, over an ``AsyncConnectionPool`` or ``AsyncConnection``."""

    _dialect = POSTGRES

    def __init__(
        self,
        conn: AsyncConnectionPool | psycopg.AsyncConnection[Any],
        pipe: psycopg.AsyncPipeline | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(conn, AsyncConnectionPool) and pipe is not None:
            raise ConfigError(
                "pipe= works with a single AsyncConnection only, not with an AsyncConnectionPool"
            )
        super().__init__(**kwargs)
        self.conn = conn
        self.pipe = pipe
        self.lock = asyncio.Lock()

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.psycopg(self.conn)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_size: int = 10,
        read_only: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[AsyncPostgresSaver]:
        """Async version of :meth:`PostgresSaver.from_conn_string`."""
        dsn = _dsn(conn_string)
        try:
            first = await psycopg.AsyncConnection.connect(
                dsn, connect_timeout=_CONNECT_TIMEOUT, **_pool_kwargs(dsn, read_only)
            )
        except psycopg.Error as exc:
            raise _unreachable(dsn, exc) from None
        if pipeline:
            async with first, first.pipeline() as pipe:
                saver = cls(first, pipe, read_only=read_only, **kwargs)
                saver._where = f"PostgreSQL at {describe_postgres(dsn)}"
                retain_idle_connections(saver.lease_target)
                try:
                    yield saver
                finally:
                    await asyncio.to_thread(close_idle_connections, saver.lease_target)
            return
        await first.close()
        pool = _AsyncPool(
            dsn,
            kwargs=_pool_kwargs(dsn, read_only),
            min_size=1,
            max_size=pool_size,
            open=False,
            check=_pgpool.acheck,
        )
        try:
            await pool.open(wait=True, timeout=_CONNECT_TIMEOUT)
        except Exception as exc:
            await pool.close()
            raise _unreachable(dsn, exc) from None
        try:
            saver = cls(pool, read_only=read_only, **kwargs)
            saver._where = f"PostgreSQL at {describe_postgres(dsn)}"
            retain_idle_connections(LeaseTarget.psycopg(pool))
            yield saver
        finally:
            await asyncio.to_thread(close_idle_connections, LeaseTarget.psycopg(pool))
            await pool.close()

    def _connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        if isinstance(self.conn, AsyncConnectionPool):
            return self.conn.connection()
        return self._single()

    @asynccontextmanager
    async def _single(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.lock:
            yield self.conn  # type: ignore[misc]

    @asynccontextmanager
    async def _transaction(self, write: bool, snapshot: bool = True) -> AsyncIterator[AExecute]:
        """Async version of :meth:`PostgresSaver._transaction`."""
        try:
            async with self._connection() as conn:
                if not write and conn.autocommit and self.pipe is None:
                    if snapshot:
                        async with apipelined(conn, _BEGIN_READ) as run_one:
                            yield run_one
                    else:
                        async with conn.cursor(row_factory=tuple_row) as cur:
                            yield functools.partial(aexecute, cur)
                elif not write:
                    async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        await cur.execute(_READ_ONLY)
                        yield functools.partial(aexecute, cur)
                elif conn.autocommit and self.pipe is None:
                    async with apipelined(conn) as run_one:
                        yield run_one
                else:
                    async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        yield functools.partial(aexecute, cur)
            if self.pipe is not None:
                await self.pipe.sync()
        except psycopg.errors.DivisionByZero as exc:
            raise StaleCacheError from exc
        except psycopg.Error as exc:
            raise _storage_error(exc) from exc
