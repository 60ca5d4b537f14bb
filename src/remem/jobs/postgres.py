"""The queue in PostgreSQL (the same database as the threads)."""

from __future__ import annotations

import functools
from typing import Any

from remem import _migrate
from remem._statements import Program, Statement, drive, execute
from remem.errors import MissingDependencyError, StorageError
from remem.jobs import _sql
from remem.jobs._queue import JobQueue

__all__ = ["PostgresQueue"]

# Claims take turns under this transaction lock (a claim is one short statement), so that two workers
# never start two jobs of one thread at once; FOR UPDATE SKIP LOCKED passes over the rows other
# transactions hold (a heartbeat, a completion) instead of waiting for them.
CLAIM_LOCK_KEY = 0x72656D656D6A  # "rememj"


def _error(exc: BaseException) -> StorageError:
    return StorageError(
        f"PostgreSQL refused the job queue operation ({type(exc).__name__}: {str(exc).strip()[:200]}); check "
        "that the server is up and the user may write to the database"
    )


class PostgresQueue(JobQueue):
    """A queue on its own ``psycopg`` connection; each operation is one transaction.

    A connection the server dropped is opened again at the next operation.
    """

    dialect = "postgres"

    def __init__(self, conn: Any, connect: Any = None) -> None:
        super().__init__()
        self.conn = conn
        self._connect = connect

    @classmethod
    def open(cls, dsn: str, *, read_only: bool = False) -> PostgresQueue | None:
        """Connect to ``dsn`` and set the queue's table up; :meth:`close` it.

        ``read_only``: create nothing, and return None when the database holds no queue.
        """
        try:
            import psycopg
        except ImportError:  # pragma: no cover - psycopg is installed with the postgres extra
            raise MissingDependencyError.for_extra("psycopg", "postgres") from None

        def connect() -> Any:
            try:
                return psycopg.connect(dsn, autocommit=True)
            except psycopg.Error as exc:
                raise _error(exc) from exc

        queue = cls(connect(), connect)
        try:
            with queue._lock:
                if read_only:
                    version = drive(_migrate.check(_sql.JOBS, "postgres"), queue._statement)
                    if not version:
                        queue.close()
                        return None
                else:
                    _migrate.run_postgres(queue.conn, _sql.JOBS)
        except psycopg.Error as exc:
            queue.close()
            raise _error(exc) from exc
        except BaseException:
            queue.close()
            raise
        return queue

    def _statement(self, statement: Statement) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self.conn.cursor(row_factory=tuple_row) as cur:
            return execute(cur, statement)

    def _run(self, program: Program[Any], *, claim: bool = False) -> Any:
        import psycopg
        from psycopg.rows import tuple_row

        with self._lock:
            if self._connect is not None and (self.conn.closed or self.conn.broken):
                self.conn = self._connect()
            try:
                with self.conn.transaction(), self.conn.cursor(row_factory=tuple_row) as cur:
                    if claim:
                        cur.execute("SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK_KEY,))
                    return drive(program, functools.partial(execute, cur))
            except psycopg.Error as exc:
                raise _error(exc) from exc

    def close(self) -> None:
        self.conn.close()
