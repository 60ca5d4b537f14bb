"""The ledger in PostgreSQL (the same database as the threads)."""

from __future__ import annotations

import threading
from typing import Any

from remem import _migrate
from remem.errors import MissingDependencyError, StorageError
from remem.usage._base import Ledger
from remem.usage._sql import LEDGER

__all__ = ["PostgresLedger"]


def _error(exc: BaseException) -> StorageError:
    return StorageError(
        f"PostgreSQL refused the usage ledger operation ({type(exc).__name__}); check that the server is up "
        "and the user may write to the database"
    )


class PostgresLedger(Ledger):
    """A ledger on a ``psycopg`` connection (autocommit: each record is its own transaction)."""

    dialect = "postgres"

    def __init__(self, conn: Any, *, owns: bool = False) -> None:
        self.conn = conn
        self._owns = owns
        self._lock = threading.Lock()

    @classmethod
    def open(cls, dsn: str) -> PostgresLedger:
        """Connect to ``dsn`` and set the schema up; :meth:`close` it."""
        try:
            import psycopg
        except ImportError:  # pragma: no cover - psycopg is installed with the postgres extra
            raise MissingDependencyError.for_extra("psycopg", "postgres") from None
        try:
            conn = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as exc:
            raise _error(exc) from exc
        ledger = cls(conn, owns=True)
        try:
            ledger.setup()
        except BaseException:
            ledger.close()
            raise
        return ledger

    @classmethod
    def open_read_only(cls, dsn: str) -> PostgresLedger | None:
        """Connect read-only; None when the database holds no ledger (nothing is created)."""
        import psycopg
        from psycopg.rows import tuple_row

        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
            conn.read_only = True
        except psycopg.Error as exc:
            raise _error(exc) from exc
        ledger = cls(conn, owns=True)
        try:
            with conn.cursor(row_factory=tuple_row) as cur:

                def execute(statement: _migrate.Statement) -> list[tuple[Any, ...]]:
                    cur.execute(statement.sql, statement.params)
                    return list(cur.fetchall()) if statement.rows else []

                version = _migrate.drive(_migrate.check(LEDGER, "postgres"), execute)
        except psycopg.Error as exc:
            ledger.close()
            raise _error(exc) from exc
        except BaseException:
            ledger.close()
            raise
        if version == 0:
            ledger.close()
            return None
        return ledger

    def setup(self) -> None:
        import psycopg

        with self._lock:
            try:
                _migrate.run_postgres(self.conn, LEDGER)
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        import psycopg

        with self._lock:
            try:
                self.conn.execute(sql, params)
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        import psycopg
        from psycopg.rows import tuple_row

        with self._lock:
            try:
                with self.conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(sql, params)
                    return list(cur.fetchall())
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def close(self) -> None:
        if self._owns:
            self.conn.close()
