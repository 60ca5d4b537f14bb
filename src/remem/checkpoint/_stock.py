"""LangGraph's stock checkpoint tables, for an erasure on a database that holds only them.

A database an app wrote with LangGraph's own ``SqliteSaver`` / ``PostgresSaver`` has their tables and none
of remem's. ``remem forget`` there must neither pretend that nothing is stored nor create remem's tables:
:func:`stock_threads` finds the threads a scope covers (by id, or whose latest checkpoint's metadata names
the user, the rule remem's own erasure follows) and :func:`erase_stock_threads` deletes their rows from
every stock table, then compacts (SQLite: VACUUM and a truncated WAL; PostgreSQL: VACUUM FULL of the
stock tables). Plain SQL: the stock saver packages are not needed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from remem._url import parse_database_url
from remem.errors import ConfigError, StorageError

__all__ = ["StockErasure", "erase_stock_threads", "stock_threads"]

_TABLES = {
    "sqlite": ("writes", "checkpoints"),
    "postgres": ("checkpoint_writes", "checkpoint_blobs", "checkpoints"),
}
Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


@dataclass
class StockErasure:
    """What an erasure of stock checkpoints removed, and whether storage was compacted."""

    scope: str
    threads: list[str] = field(default_factory=list)
    checkpoints: int = 0
    compacted: bool = False
    compaction: str = "not reached"

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("erased", f"LangGraph stock checkpoints of {self.scope}"),
            ("threads whose checkpoints were deleted", f"{len(self.threads)}: {', '.join(self.threads)}"),
            ("checkpoints", str(self.checkpoints)),
            ("storage compacted", ("yes: " if self.compacted else "NO: ") + self.compaction),
        ]


@contextmanager
def _database(url: str) -> Iterator[tuple[str, Run, Any]]:
    parsed = parse_database_url(url)
    if parsed.kind == "sqlite":
        conn = sqlite3.connect(parsed.sqlite_path, isolation_level=None, timeout=30)
        try:

            def run(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
                return conn.execute(sql, tuple(params)).fetchall()

            yield "sqlite", run, conn
        finally:
            conn.close()
    elif parsed.kind == "postgres":
        import psycopg

        from remem.checkpoint.postgres import _unreachable

        try:
            pg = psycopg.connect(parsed.target, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise _unreachable(parsed.target, exc) from None
        with pg:

            def prun(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
                cur = pg.execute(sql.replace("?", "%s"), tuple(params))
                return list(cur.fetchall()) if cur.description else []

            yield "postgres", prun, pg
    else:
        raise ConfigError("memory:// holds no stock checkpoints; give a sqlite:/// or postgresql:// URL")


def _metadata(raw: Any) -> dict[str, Any]:
    if isinstance(raw, bytes | memoryview):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _has_stock_tables(kind: str, run: Run) -> bool:
    if kind == "postgres":
        rows = run(
            "SELECT to_regclass('checkpoints') IS NOT NULL AND to_regclass('checkpoint_writes') IS NOT NULL",
            (),
        )
        return bool(rows[0][0])
    names = {r[0] for r in run("SELECT name FROM sqlite_master WHERE type = 'table'", ())}
    return {"checkpoints", "writes"} <= names


def _threads(run: Run, user_id: str | None, thread_id: str | None) -> dict[str, int]:
    counts = {
        str(t): int(n) for t, n in run("SELECT thread_id, COUNT(*) FROM checkpoints GROUP BY thread_id", ())
    }
    if thread_id is not None:
        return {thread_id: counts[thread_id]} if thread_id in counts else {}
    found: dict[str, int] = {}
    for thread, n in sorted(counts.items()):
        rows = run(
            "SELECT metadata FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''"
            " ORDER BY checkpoint_id DESC LIMIT 1",
            (thread,),
        )
        if rows and _metadata(rows[0][0]).get("user_id") == user_id:
            found[thread] = n
    return found


def stock_threads(url: str, *, user_id: str | None = None, thread_id: str | None = None) -> dict[str, int]:
    """The threads of the stock checkpoints at ``url`` that the scope covers, with their checkpoint counts:
    ``thread_id``, or the threads whose latest checkpoint's metadata has ``user_id``. Reads only."""
    with _database(url) as (kind, run, _conn):
        return _threads(run, user_id, thread_id) if _has_stock_tables(kind, run) else {}


def erase_stock_threads(
    url: str, *, user_id: str | None = None, thread_id: str | None = None
) -> StockErasure:
    """Delete the stock checkpoints (and their writes and blobs) of the threads the scope covers, then
    compact. Creates no table; running it again after a failure finishes it."""
    scope = f"user {user_id}" if user_id is not None else f"thread {thread_id}"
    report = StockErasure(scope)
    with _database(url) as (kind, run, conn):
        threads = _threads(run, user_id, thread_id) if _has_stock_tables(kind, run) else {}
        report.threads, report.checkpoints = sorted(threads), sum(threads.values())
        for thread in report.threads:
            with _transaction(kind, conn):
                for table in _TABLES[kind]:
                    run(f"DELETE FROM {table} WHERE thread_id = ?", (thread,))
        report.compacted, report.compaction = _compact(kind, run)
    return report


@contextmanager
def _transaction(kind: str, conn: Any) -> Iterator[None]:
    if kind == "postgres":
        with conn.transaction():
            yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _compact(kind: str, run: Run) -> tuple[bool, str]:
    try:
        if kind == "postgres":
            run("VACUUM FULL " + ", ".join(_TABLES["postgres"]), ())
            return (
                True,
                "VACUUM FULL of the stock tables (the WAL, archives and backups may still hold copies)",
            )
        run("VACUUM", ())
        busy = run("PRAGMA wal_checkpoint(TRUNCATE)", ())
    except Exception as exc:  # any driver error means: not compacted
        raise StorageError(
            f"the stock checkpoints were deleted, but compaction failed ({type(exc).__name__}: {exc}); "
            "run the same command again when no other connection uses the database"
        ) from exc
    if busy and busy[0][0]:
        return False, "another connection still reads old pages: run the same command again"
    return True, "VACUUM, and the WAL checkpointed and truncated"
