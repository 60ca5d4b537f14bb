"""The ledger in PostgreSQL (the same database as the threads)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from remem import _migrate
from remem._statements import Execute, Program, Statement, drive, execute, pipelined, run
from remem.errors import MissingDependencyError, StorageError
from remem.usage import _sql
from remem.usage._base import Ledger
from remem.usage._records import UsageEvent
from remem.usage._sql import LEDGER

__all__ = ["PostgresLedger"]

_T = TypeVar("_T")


def _error(exc: BaseException) -> StorageError:
    return StorageError(
        f"PostgreSQL refused the usage ledger operation ({type(exc).__name__}); check that the server is up "
        "and the user may write to the database"
    )


# Driver options the ledger sets itself on its own connection (the rest of a pool's kwargs: how to reach
# the server, are kept).
_OWN_OPTIONS = frozenset({"autocommit", "row_factory", "cursor_factory", "prepare_threshold", "context"})


class PostgresLedger(Ledger):
    """A ledger on a ``psycopg`` connection (autocommit: each record is one statement, its own transaction).

    A ledger that opened its connection keeps it (one per ledger, used under a lock): no pool borrow and
    no connection check per call; a connection the server dropped is opened again at the next call.
    """

    dialect = "postgres"

    def __init__(self, conn: Any, *, owns: bool = False) -> None:
        self.conn = conn
        self._owns = owns
        self._lock = threading.Lock()
        self._pool: Any = None
        self._connect: Any = None  # how an owned connection is opened again

    @classmethod
    def on_pool(cls, pool: Any) -> PostgresLedger:
        """A ledger that borrows a connection of ``pool`` (a ``psycopg_pool.ConnectionPool``, such as a
        checkpointer's) for each statement; set up; the pool stays its owner's."""
        ledger = cls(None)
        ledger._pool = pool
        ledger.setup()
        return ledger

    @classmethod
    def beside_pool(cls, pool: Any) -> PostgresLedger:
        """A ledger on its own connection to the database of ``pool`` (a ``psycopg_pool`` pool, such as
        a checkpointer's), opened with the pool's connection settings; set up; :meth:`close` it."""
        kwargs = {k: v for k, v in (getattr(pool, "kwargs", None) or {}).items() if k not in _OWN_OPTIONS}
        return cls.open(str(pool.conninfo), **kwargs)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        if self._pool is None:
            with self._lock:
                if self._connect is not None and (self.conn.closed or self.conn.broken):
                    self.conn = self._connect()
                yield self.conn
            return
        with self._pool.connection() as conn:
            yield conn

    @classmethod
    def open(cls, dsn: str, **kwargs: Any) -> PostgresLedger:
        """Connect to ``dsn`` (``kwargs``: more connection parameters) and set the schema up; :meth:`close` it."""
        try:
            import psycopg
        except ImportError:  # pragma: no cover - psycopg is installed with the postgres extra
            raise MissingDependencyError.for_extra("psycopg", "postgres") from None

        def connect() -> Any:
            try:
                conn = psycopg.connect(dsn, autocommit=True, **kwargs)
                # As the SQLite ledger (synchronous=NORMAL): a commit does not wait for the WAL to reach the
                # disk, so a server crash may lose the last rows, never corrupt them, and a record is not a
                # disk flush (several ms) added to every model call. Only this connection, the ledger's own.
                conn.execute("SET synchronous_commit = off")
            except psycopg.Error as exc:
                raise _error(exc) from exc
            return conn

        ledger = cls(connect(), owns=True)
        ledger._connect = connect
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
                version = drive(_migrate.check(LEDGER, "postgres"), functools.partial(execute, cur))
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

        with self._connection() as conn:
            try:
                _migrate.run_postgres(conn, LEDGER)
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        import psycopg

        with self._connection() as conn:
            try:
                conn.execute(sql, params)
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def _record_event(self, event: UsageEvent) -> None:
        # The row and its running totals in one statement: one round trip, atomic in autocommit.
        self._one_trip(*_sql.record_postgres(event))

    def settle(self, event: UsageEvent, hold_id: str) -> None:
        """The row, its running totals and the hold's removal in one statement (one round trip)."""
        self._one_trip(*_sql.settle_postgres(event, hold_id))

    def _one_trip(self, sql: str, params: tuple[Any, ...]) -> None:
        """One write statement, committed without waiting for the WAL's flush, in one round trip."""
        import psycopg

        if self._pool is None:  # the ledger's own connection: synchronous_commit is off already
            with self._connection() as conn:
                try:
                    conn.execute(sql, params)
                except psycopg.Error as exc:
                    raise _error(exc) from exc
            return
        # A borrowed connection is the pool's: the no-flush commit is set for this transaction only,
        # pipelined with it.
        self._transact(_unflushed(sql, params))

    def _transact(self, program: Program[_T]) -> _T:
        """The program in one transaction, pipelined (:func:`remem._statements.pipelined`): a hold (the
        locks, the expired holds' removal and the read; then the insert and COMMIT) is two round trips."""
        return run(program, self._transaction)

    @contextmanager
    def _transaction(self) -> Iterator[Execute]:
        import psycopg
        from psycopg.rows import tuple_row

        with self._connection() as conn:
            try:
                if conn.autocommit:
                    with pipelined(conn) as run_one:
                        yield run_one
                else:  # a connection of the caller's that is not in autocommit mode
                    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                        yield functools.partial(execute, cur)
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        import psycopg
        from psycopg.rows import tuple_row

        with self._connection() as conn:
            try:
                with conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(sql, params)
                    return list(cur.fetchall())
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def close(self) -> None:
        if self._owns:
            self.conn.close()


def _unflushed(sql: str, params: tuple[Any, ...]) -> Program[None]:
    """One write whose commit does not wait for the WAL's flush (this transaction only)."""
    yield Statement("SET LOCAL synchronous_commit = off", (), "none")
    yield Statement(sql, params, "none")
