"""The ledger in a SQLite file (the same file as the thread's checkpoints, or its own)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from remem import _migrate, _sqlite, _statements
from remem._files import make_private_file
from remem._statements import Program, drive, execute, run_immediate
from remem.errors import StorageError
from remem.usage._base import Ledger
from remem.usage._records import UsageEvent
from remem.usage._sql import LEDGER, record_sqlite

__all__ = ["SqliteLedger"]

_T = TypeVar("_T")


def _error(exc: BaseException, conn: sqlite3.Connection | None = None) -> StorageError:
    where = "the SQLite database" if conn is None else _sqlite.database_file(conn)
    return _sqlite.storage_error(exc, where=where, doing="the usage ledger operation")


class SqliteLedger(Ledger):
    """A ledger on a ``sqlite3`` connection (switched to autocommit; each record is its own transaction)."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection, *, owns: bool = False, lock: Any = None) -> None:
        self.conn = conn
        self._owns = owns
        self._lock = lock if lock is not None else threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        if lock is not None:  # a connection shared with its owner (a checkpointer): its settings stay
            return
        try:
            conn.isolation_level = None
            conn.execute(f"PRAGMA busy_timeout = {_sqlite.BUSY_TIMEOUT_MS}")
        except sqlite3.Error as exc:
            raise _error(exc, conn) from exc

    @classmethod
    def sharing(cls, conn: sqlite3.Connection, lock: Any) -> SqliteLedger:
        """A ledger on a connection in autocommit mode that another object owns (remem's ``SqliteSaver``),
        taking ``lock`` (the owner's ``threading.Lock``) around each statement, so that a record never
        lands inside the owner's transaction; set up; closed with the connection, by its owner."""
        ledger = cls(conn, lock=lock)
        ledger.setup()
        ledger._reader = _wal_reader(conn, lock)
        return ledger

    @classmethod
    @contextmanager
    def from_path(cls, path: str | Path) -> Iterator[SqliteLedger]:
        """Open (creating owner-only) a SQLite file, set the schema up, close it on exit."""
        ledger = cls.open(path)
        try:
            yield ledger
        finally:
            ledger.close()

    @classmethod
    def open(cls, path: str | Path) -> SqliteLedger:
        """Open (creating owner-only) a SQLite file and set the schema up; :meth:`close` it."""
        target = str(path)
        try:
            if target != ":memory:":
                make_private_file(Path(target))
            conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise _error(exc) from exc
        ledger = cls(conn, owns=True)
        try:
            if target != ":memory:":
                # As the checkpointer does: WAL, and no fsync per record (a crash may lose the last rows,
                # never corrupt the file).
                _sqlite.enable_wal(conn)
                conn.execute("PRAGMA synchronous = NORMAL")
            ledger.setup()
        except BaseException:
            ledger.close()
            raise
        return ledger

    @classmethod
    def open_read_only(cls, path: str | Path) -> SqliteLedger | None:
        """Open an existing file to read it; None when it holds no ledger (nothing is created or written).

        A file this process may not write is opened by the CLI from a private copy (``inspect_database``).
        """
        import urllib.parse

        from remem.errors import NotFoundError

        if not Path(path).is_file():
            raise NotFoundError(f"there is no database at {path}; check --db or REMEM_DATABASE_URL")
        try:
            conn = sqlite3.connect(
                # mode=rw, not ro: never creates the file, and closing the last connection folds SQLite's
                # -wal/-shm files back, so a read leaves the files byte for byte as they were (a read-only
                # connection would leave them behind). Only SELECTs run on it.
                f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=rw",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise _error(exc) from exc
        ledger = cls(conn, owns=True)
        try:
            version = drive(_migrate.check(LEDGER, "sqlite"), ledger._statement)
        except sqlite3.Error as exc:
            error = _error(exc, conn)
            ledger.close()
            raise error from exc
        except BaseException:
            ledger.close()
            raise
        if version == 0:
            ledger.close()
            return None
        return ledger

    def _statement(self, statement: _statements.Statement) -> list[tuple[Any, ...]]:
        return execute(self.conn.cursor(), statement)

    def setup(self) -> None:
        with self._lock:
            try:
                _migrate.run_sqlite(self.conn, LEDGER)
            except sqlite3.Error as exc:
                raise _error(exc, self.conn) from exc

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                self.conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise _error(exc, self.conn) from exc

    def _record_event(self, event: UsageEvent) -> None:
        # One INSERT in autocommit: the schema's trigger adds the row to its running totals inside it, so
        # the row and its totals commit together (or neither), and a repeated call id adds nothing.
        sql, params = record_sqlite(event)
        with self._lock:
            try:
                self.conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise _error(exc, self.conn) from exc

    def _transact(self, program: Program[_T]) -> _T:
        # On the writing connection (never the WAL reader): BEGIN IMMEDIATE takes the file's write lock
        # first, so that what the program reads cannot change before it writes.
        with self._lock:
            conn = self.conn
            try:
                return run_immediate(conn, program)
            except sqlite3.Error as exc:
                raise _error(exc, conn) from exc

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        reader = self._reader
        conn, lock = (self.conn, self._lock) if reader is None else (reader, self._reader_lock)
        with lock:
            try:
                return list(conn.execute(sql, params).fetchall())
            except sqlite3.Error as exc:
                raise _error(exc, self.conn) from exc

    def close(self) -> None:
        with self._reader_lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        if self._owns:
            self.conn.close()


def _wal_reader(conn: sqlite3.Connection, lock: Any) -> sqlite3.Connection | None:
    """A connection of the ledger's own to read a shared WAL file: a budget read then never waits for the
    owner's lock (held through a checkpoint write that may run beside the model call); None for a file not
    in WAL mode (a reader would wait for a writer's commit there) or a database in memory."""
    with lock:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            path = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "")
        except sqlite3.Error as exc:
            raise _error(exc) from exc
    if str(mode).lower() != "wal" or not path:
        return None
    try:
        reader = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        reader.execute(f"PRAGMA busy_timeout = {_sqlite.BUSY_TIMEOUT_MS}")
        reader.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        raise _error(exc) from exc
    return reader
