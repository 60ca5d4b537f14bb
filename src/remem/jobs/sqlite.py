"""The queue in a SQLite file (the same file as the threads, or its own)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from remem import _migrate, _sqlite
from remem._files import make_private_file
from remem._statements import Program, run_immediate
from remem.errors import StorageError
from remem.jobs import _sql
from remem.jobs._queue import JobQueue

__all__ = ["SqliteQueue"]


def _check() -> Program[int]:
    """The queue schema's version (0: none), refusing a newer one, as a program."""
    return (yield from _migrate.check(_sql.JOBS, "sqlite"))


def _error(exc: BaseException, conn: sqlite3.Connection | None = None) -> StorageError:
    where = "the SQLite database" if conn is None else _sqlite.database_file(conn)
    return _sqlite.storage_error(exc, where=where, doing="the job queue operation")


class SqliteQueue(JobQueue):
    """A queue on its own ``sqlite3`` connection: each operation is one ``BEGIN IMMEDIATE`` transaction,
    so a claim (an ``UPDATE ... RETURNING``) is atomic across every process that opens the file."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__()
        self.conn = conn

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> SqliteQueue | None:
        """Open (creating owner-only) a SQLite file and set the queue's table up; :meth:`close` it.

        ``read_only``: open an existing file, create nothing, and return None when it holds no queue.
        """
        target = str(path)
        if read_only:
            return cls._open_existing(target)
        try:
            if target != ":memory:":
                make_private_file(Path(target))
            conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {_sqlite.BUSY_TIMEOUT_MS}")
            if target != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
        except (OSError, sqlite3.Error) as exc:
            raise _error(exc) from exc
        queue = cls(conn)
        try:
            with queue._lock:
                _migrate.run_sqlite(conn, _sql.JOBS)
        except sqlite3.Error as exc:
            queue.close()
            raise _error(exc, conn) from exc
        except BaseException:
            queue.close()
            raise
        return queue

    @classmethod
    def _open_existing(cls, target: str) -> SqliteQueue | None:
        import urllib.parse

        from remem.errors import NotFoundError

        if not Path(target).is_file():
            raise NotFoundError(f"there is no database at {target}; check --db or REMEM_DATABASE_URL")
        try:
            # mode=rw, not ro: never creates the file (as the ledger's read-only opening does).
            conn = sqlite3.connect(
                f"file:{urllib.parse.quote(str(Path(target).resolve()))}?mode=rw",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
            )
            conn.execute(f"PRAGMA busy_timeout = {_sqlite.BUSY_TIMEOUT_MS}")
            statement = _migrate.table_exists("sqlite", _sql.T)
            found = conn.execute(statement.sql, statement.params).fetchall()
        except sqlite3.Error as exc:
            raise _error(exc) from exc
        if not found:
            conn.close()
            return None
        queue = cls(conn)
        version = queue._run(_check())
        if not version:  # pragma: no cover - a table without its record: not remem's
            queue.close()
            return None
        return queue

    def _run(self, program: Program[Any], *, claim: bool = False) -> Any:
        with self._lock:
            conn = self.conn
            try:
                return run_immediate(conn, program)
            except sqlite3.Error as exc:
                raise _error(exc, conn) from exc

    def close(self) -> None:
        self.conn.close()
