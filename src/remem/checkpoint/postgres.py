"""remem's checkpointers on PostgreSQL: :class:`PostgresSaver` and :class:`AsyncPostgresSaver` (psycopg 3).

Each operation borrows a connection from a ``psycopg_pool`` pool for one transaction, so a saver shared
by many threads or tasks runs their queries in parallel; writes to one thread are ordered by a lock on
that thread's row only. Reads run in a ``REPEATABLE READ`` read-only transaction, so a checkpoint and
the values it references are read from one snapshot.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any

from remem.checkpoint import _ops as ops
from remem.checkpoint._base import AExecute, AsyncSaver, Execute, SyncSaver
from remem.checkpoint._sql import POSTGRES
from remem.errors import MissingDependencyError, StorageError

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as exc:  # pragma: no cover - the dev environment has the extra
    raise MissingDependencyError.for_extra("psycopg[pool]", "postgres") from exc

__all__ = ["AsyncPostgresSaver", "PostgresSaver"]

_READ_ONLY = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_CONNECT_KWARGS = {"autocommit": True}


def _storage_error(exc: BaseException) -> StorageError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return StorageError(
        f"PostgreSQL refused the checkpoint operation ({first}); check that the server is running, "
        "that the URL is right and that the user may create tables (setup() creates them)"
    )


def _where(conn_string: str) -> str:
    return conn_string.split("@")[-1]  # never echo a password


class PostgresSaver(SyncSaver):
    """A LangGraph checkpointer that stores each value of a thread once, in PostgreSQL.

    Example:
        >>> with PostgresSaver.from_conn_string("postgresql://localhost/app") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)

    Give it a ``ConnectionPool`` (preferred: no lock around the saver) or one ``Connection`` (then its
    operations take turns).
    """

    _dialect = POSTGRES

    def __init__(self, conn: ConnectionPool | psycopg.Connection[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn = conn
        self.lock = threading.Lock()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, *, pool_size: int = 10, **kwargs: Any
    ) -> Iterator[PostgresSaver]:
        """Open a saver with a connection pool of up to ``pool_size`` connections; closed on exit."""
        pool = ConnectionPool(conn_string, kwargs=_CONNECT_KWARGS, min_size=1, max_size=pool_size, open=False)
        try:
            pool.open(wait=True, timeout=10)
        except Exception as exc:
            pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {_where(conn_string)} ({exc})") from exc
        try:
            yield cls(pool, **kwargs)
        finally:
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
    def _transaction(self, write: bool) -> Iterator[Execute]:
        try:
            with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
                if not write:
                    cur.execute(_READ_ONLY)

                def execute(query: ops.Query) -> list[tuple[Any, ...]]:
                    if query.fetch == "many":
                        cur.executemany(query.sql, query.params)
                        return []
                    cur.execute(query.sql, query.params)
                    return cur.fetchall() if query.fetch == "all" else []

                yield execute
        except psycopg.Error as exc:
            raise _storage_error(exc) from exc


class AsyncPostgresSaver(AsyncSaver):
    """Async version of :class:`PostgresSaver`, over an ``AsyncConnectionPool`` or ``AsyncConnection``."""

    _dialect = POSTGRES

    def __init__(self, conn: AsyncConnectionPool | psycopg.AsyncConnection[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn = conn
        self.lock = asyncio.Lock()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, *, pool_size: int = 10, **kwargs: Any
    ) -> AsyncIterator[AsyncPostgresSaver]:
        """Async version of :meth:`PostgresSaver.from_conn_string`."""
        pool = AsyncConnectionPool(
            conn_string, kwargs=_CONNECT_KWARGS, min_size=1, max_size=pool_size, open=False
        )
        try:
            await pool.open(wait=True, timeout=10)
        except Exception as exc:
            await pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {_where(conn_string)} ({exc})") from exc
        try:
            yield cls(pool, **kwargs)
        finally:
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
    async def _transaction(self, write: bool) -> AsyncIterator[AExecute]:
        try:
            async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
                if not write:
                    await cur.execute(_READ_ONLY)

                async def execute(query: ops.Query) -> list[tuple[Any, ...]]:
                    if query.fetch == "many":
                        await cur.executemany(query.sql, query.params)
                        return []
                    await cur.execute(query.sql, query.params)
                    return await cur.fetchall() if query.fetch == "all" else []

                yield execute
        except psycopg.Error as exc:
            raise _storage_error(exc) from exc
