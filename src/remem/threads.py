"""Threads by URL: one string picks where a thread's state lives.

    memory://                      in this process only
    sqlite:///relative/path.db     a SQLite file (sqlite:////absolute/path.db)
    postgresql://user@host/db      PostgreSQL, through a connection pool

``checkpointer_from_url`` opens the checkpointer, creates its tables, and closes it on exit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from remem._url import DatabaseURL, describe_postgres, display_url, parse_database_url
from remem.errors import NotFoundError, StorageError

__all__ = [
    "DatabaseURL",
    "acheckpointer_from_url",
    "checkpointer_from_url",
    "display_url",
    "list_threads",
    "parse_database_url",
]


def _prepare_sqlite_path(path: Path, create: bool) -> None:
    """Make the file's folder (or, with ``create=False``, insist the file exists)."""
    if str(path) == ":memory:":
        return
    if not create and not path.is_file():
        raise NotFoundError(f"there is no database at {path}; check --db or REMEM_DATABASE_URL")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _sqlite_unusable(path, exc) from exc


def _sqlite_unusable(path: Path, exc: Exception) -> StorageError:
    return StorageError(f"cannot open the SQLite file {path} ({exc}); check the path and its permissions")


def _open_sqlite(path: Path, create: bool) -> sqlite3.Connection:
    _prepare_sqlite_path(path, create)
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        raise _sqlite_unusable(path, exc) from exc
    return conn


def _postgres_unreachable(dsn: str, exc: Exception) -> StorageError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StorageError(
        f"cannot connect to PostgreSQL at {describe_postgres(dsn)} ({reason}); "
        "check that the server is running and that REMEM_DATABASE_URL is right"
    )


def _check_postgres(dsn: str) -> None:
    """One plain connection first: it fails fast with the server's own reason, where a pool retries."""
    import psycopg

    describe_postgres(dsn)
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        raise _postgres_unreachable(dsn, exc) from exc


async def _acheck_postgres(dsn: str) -> None:
    """Async version of :func:`_check_postgres`."""
    import psycopg

    describe_postgres(dsn)
    try:
        await (await psycopg.AsyncConnection.connect(dsn, connect_timeout=5)).close()
    except psycopg.Error as exc:
        raise _postgres_unreachable(dsn, exc) from exc


@contextmanager
def checkpointer_from_url(url: str, *, create: bool = True) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the checkpointer that ``url`` names, with its tables created; close it on exit.

    ``create=False`` refuses to make a new SQLite file (for commands that only read).
    """
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        yield InMemorySaver()
    elif parsed.kind == "sqlite":
        from remem.checkpoint import SqliteSaver

        conn = _open_sqlite(parsed.sqlite_path, create)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
        finally:
            conn.close()
    else:
        describe_postgres(parsed.target)  # without psycopg: names the `postgres` extra
        from psycopg_pool import ConnectionPool

        from remem.checkpoint import PostgresSaver

        _check_postgres(parsed.target)
        pool = ConnectionPool(parsed.target, kwargs={"autocommit": True}, min_size=1, max_size=8, open=False)
        try:
            pool.open(wait=True, timeout=10)
        except Exception as exc:
            pool.close()
            raise _postgres_unreachable(parsed.target, exc) from exc
        try:
            pg_saver = PostgresSaver(pool)
            pg_saver.setup()
            yield pg_saver
        finally:
            pool.close()


@asynccontextmanager
async def acheckpointer_from_url(url: str, *, create: bool = True) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Async version of :func:`checkpointer_from_url`."""
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        yield InMemorySaver()
    elif parsed.kind == "sqlite":
        import aiosqlite

        from remem.checkpoint import AsyncSqliteSaver

        _prepare_sqlite_path(parsed.sqlite_path, create)
        async with aiosqlite.connect(parsed.target) as conn:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            yield saver
    else:
        describe_postgres(parsed.target)  # without psycopg: names the `postgres` extra
        from psycopg_pool import AsyncConnectionPool

        from remem.checkpoint import AsyncPostgresSaver

        await _acheck_postgres(parsed.target)
        pool = AsyncConnectionPool(
            parsed.target, kwargs={"autocommit": True}, min_size=1, max_size=8, open=False
        )
        try:
            await pool.open(wait=True, timeout=10)
        except Exception as exc:
            await pool.close()
            raise _postgres_unreachable(parsed.target, exc) from exc
        try:
            pg_saver = AsyncPostgresSaver(pool)
            await pg_saver.setup()
            yield pg_saver
        finally:
            await pool.close()


def list_threads(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """Thread ids with at least one checkpoint, most recently written first."""
    own = getattr(saver, "list_threads", None)
    if callable(own):
        return list(own())
    if isinstance(saver, InMemorySaver):
        # Checkpoint ids are time-ordered (uuid6): a thread's newest is its largest.
        newest = {
            t: max((c for ns in spaces.values() for c in ns), default="")
            for t, spaces in saver.storage.items()
        }
        return sorted(newest, key=lambda t: newest[t], reverse=True)
    sql = "SELECT thread_id FROM checkpoints GROUP BY thread_id ORDER BY max(checkpoint_id) DESC"
    conn = getattr(saver, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        return [row[0] for row in conn.execute(sql)]
    if conn is not None and hasattr(conn, "connection"):
        with conn.connection() as pg:
            return [row["thread_id"] for row in pg.execute(sql)]
    # Any other saver: walk its checkpoints (slower, but complete).
    seen: dict[str, None] = {}
    for item in saver.list(None):
        seen.setdefault(str(item.config["configurable"]["thread_id"]), None)
    return list(seen)
