"""remem's checkpointers on SQLite: :class:`SqliteSaver` (sqlite3) and :class:`AsyncSqliteSaver` (aiosqlite).

The database runs in WAL mode with a busy timeout, so readers never wait for a writer and several
processes can share one file; every write is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remem import _sqlite
from remem._files import make_private_file
from remem._lease import LeaseTarget, close_idle_connections, retain_idle_connections
from remem._statements import AExecute, Execute, aexecute, execute
from remem._url import display_url, parse_database_url
from remem.checkpoint._async import AsyncSaver
from remem.checkpoint._sql import SQLITE
from remem.checkpoint._sync import SyncSaver
from remem.errors import ConfigError, MissingDependencyError, NotFoundError, RememUsageError, StorageError

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["AsyncSqliteSaver", "SqliteSaver"]

BUSY_TIMEOUT_MS = _sqlite.BUSY_TIMEOUT_MS
_PRAGMAS = (f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",)


def _storage_error(exc: BaseException, where: str = "the SQLite database") -> StorageError:
    return _sqlite.storage_error(exc, where=where, doing="the checkpoint operation")


def _wants_wal(journal_mode: str, read_only: bool) -> bool:
    return not read_only and journal_mode.lower() != "memory"


def _connect_args(conn_string: str | Path, read_only: bool) -> tuple[str, dict[str, Any]]:
    """What to hand ``sqlite3.connect`` / ``aiosqlite.connect`` for ``conn_string``.

    A path, ``":memory:"`` or a ``sqlite:///`` URL (parsed by :func:`remem._url.parse_database_url`). A new
    file is created owner-only; ``read_only`` opens an existing file with ``mode=ro`` and creates nothing.
    """
    parsed = parse_database_url(conn_string)
    if parsed.kind == "memory":
        return ":memory:", {}
    if parsed.kind != "sqlite":
        raise ConfigError(
            "a PostgreSQL URL was given to a SQLite saver; use remem.checkpoint.PostgresSaver for it, "
            "or give a file path or sqlite:///PATH"
        )
    path = parsed.sqlite_path
    if parsed.target == ":memory:":
        return ":memory:", {}
    if read_only:
        if not path.is_file():
            raise NotFoundError(f"there is no database at {path}; check --db or REMEM_DATABASE_URL")
        return f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro", {"uri": True}
    try:
        make_private_file(path)
    except OSError as exc:
        raise _unusable(path, exc) from exc
    return str(path), {}


def _unusable(path: Path, exc: BaseException) -> StorageError:
    return StorageError(f"cannot open the SQLite file {path} ({exc}); check the path and its permissions")


class SqliteSaver(SyncSaver):
    """A LangGraph checkpointer that stores each value of a thread once, in a SQLite file.

    Example:
        >>> with SqliteSaver.from_conn_string("checkpoints.db") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)

    The connection is switched to autocommit mode: the saver runs its own transactions.
    """

    _dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn = conn
        self.lock = threading.Lock()
        try:
            conn.isolation_level = None
            for pragma in _PRAGMAS:
                conn.execute(pragma)
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if _wants_wal(mode, self.read_only):
                _sqlite.enable_wal(conn)
                conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise _storage_error(exc, _sqlite.database_file(conn)) from exc

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.sqlite(self.conn, where=self._where)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str | Path, *, read_only: bool = False, **kwargs: Any
    ) -> Iterator[SqliteSaver]:
        """Open a saver on a file path, ``":memory:"`` or a ``sqlite:///`` URL; the connection is closed on exit.

        A new file is created owner-only (0600). ``read_only=True`` opens an existing file read-only, creates
        nothing, and :meth:`setup` then checks the tables instead of creating them.
        """
        target, extra = _connect_args(conn_string, read_only)
        try:
            conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, **extra)
        except sqlite3.Error as exc:
            raise _storage_error(exc, display_url(conn_string)) from exc
        kept: LeaseTarget | None = None
        try:
            saver = cls(conn, read_only=read_only, **kwargs)
            saver._where = display_url(conn_string)
            kept = saver.lease_target
            retain_idle_connections(kept)  # its leases' connection, kept while the saver is open
            yield saver
        finally:
            if kept is not None:
                close_idle_connections(kept)
            conn.close()

    @contextmanager
    def _transaction(self, write: bool, snapshot: bool = True) -> Iterator[Execute]:
        with self.lock:
            try:
                cur = self.conn.cursor()
            except sqlite3.ProgrammingError as exc:  # closed: the saver's `with` block has ended
                raise _storage_error(exc, self._where) from None
            try:
                cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                yield functools.partial(execute, cur)
                cur.execute("COMMIT")
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    self.conn.rollback()
                raise _storage_error(exc, self._where) from exc
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.rollback()
                raise
            finally:
                cur.close()


class AsyncSqliteSaver(AsyncSaver):
    """Async version of :class:`SqliteSaver`, over an ``aiosqlite`` connection."""

    _dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn = conn
        self.lock = asyncio.Lock()
        self._configured = False

    def _find_lease_target(self) -> LeaseTarget:
        raise RememUsageError(
            "an aiosqlite saver's lease target is found from async code: await saver.alease_target()"
        )

    async def alease_target(self) -> LeaseTarget:
        if self._lease_target is None:
            self._lease_target = await LeaseTarget.asqlite(self.conn)
        return self._lease_target

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str | Path, *, read_only: bool = False, **kwargs: Any
    ) -> AsyncIterator[AsyncSqliteSaver]:
        """Async version of :meth:`SqliteSaver.from_conn_string`."""
        try:
            import aiosqlite
        except ImportError as exc:  # pragma: no cover - aiosqlite is a dependency
            raise MissingDependencyError.for_extra("aiosqlite", "sqlite") from exc
        target, extra = _connect_args(conn_string, read_only)
        try:
            conn = await aiosqlite.connect(target, isolation_level=None, **extra)
        except sqlite3.Error as exc:
            raise _storage_error(exc, display_url(conn_string)) from exc
        kept: LeaseTarget | None = None
        try:
            saver = cls(conn, read_only=read_only, **kwargs)
            saver._where = display_url(conn_string)
            kept = await saver.alease_target()
            retain_idle_connections(kept)  # its leases' connection, kept while the saver is open
            yield saver
        finally:
            if kept is not None:
                await asyncio.to_thread(close_idle_connections, kept)
            await conn.close()

    async def _configure(self) -> None:
        # The saver always opens its transactions explicitly, so a connection in sqlite3's legacy
        # transaction mode (isolation_level not None) never starts one implicitly either.
        for pragma in _PRAGMAS:
            await self.conn.execute(pragma)
        async with self.conn.execute("PRAGMA journal_mode") as cur:
            row = await cur.fetchone()
        if _wants_wal(str(row[0]) if row else "memory", self.read_only):
            await _sqlite.aenable_wal(self.conn)
            await self.conn.execute("PRAGMA synchronous = NORMAL")
        self._configured = True

    @asynccontextmanager
    async def _transaction(self, write: bool, snapshot: bool = True) -> AsyncIterator[AExecute]:
        async with self.lock:
            conn = self.conn
            try:
                if not self._configured:
                    await self._configure()
                await conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                async with conn.cursor() as cur:
                    yield functools.partial(aexecute, cur)
                await conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    await conn.rollback()
                raise _storage_error(exc, self._where) from exc
            except BaseException:
                if conn.in_transaction:
                    await conn.rollback()
                raise
