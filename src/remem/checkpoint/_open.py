"""Checkpointers by URL: one string picks where a thread's state lives.

    memory://                      in this process only (LangGraph's InMemorySaver)
    sqlite:///relative/path.db     a SQLite file (sqlite:////absolute/path.db; a plain path works too)
    postgresql://user@host/db      PostgreSQL, through a connection pool that survives server restarts

The URL is parsed by :func:`remem._url.parse_database_url` and opened by the saver's own
``from_conn_string``; :func:`checkpointer_from_url` adds ``setup()`` and closes the saver on exit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from remem._url import parse_database_url

__all__ = ["acheckpointer_from_url", "checkpointer_from_url", "list_threads"]


@contextmanager
def checkpointer_from_url(url: str | Path, *, create: bool = True) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the checkpointer that ``url`` names, with its tables created; close it on exit.

    ``create=False`` is for commands that only read: SQLite is opened read-only (``mode=ro``), nothing is
    created (no file, no table), and a missing file or missing tables raise
    :class:`~remem.errors.NotFoundError` saying what to do; PostgreSQL refuses writes the same way.
    """
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        yield InMemorySaver()
        return
    if parsed.kind == "sqlite":
        from remem.checkpoint.sqlite import SqliteSaver

        opened: Any = SqliteSaver.from_conn_string(parsed.sqlite_path, read_only=not create)
    else:
        from remem.checkpoint.postgres import PostgresSaver

        opened = PostgresSaver.from_conn_string(parsed.target, read_only=not create)
    with opened as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def acheckpointer_from_url(
    url: str | Path, *, create: bool = True
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Async version of :func:`checkpointer_from_url`."""
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        yield InMemorySaver()
        return
    if parsed.kind == "sqlite":
        from remem.checkpoint.sqlite import AsyncSqliteSaver

        opened: Any = AsyncSqliteSaver.from_conn_string(parsed.sqlite_path, read_only=not create)
    else:
        from remem.checkpoint.postgres import AsyncPostgresSaver

        opened = AsyncPostgresSaver.from_conn_string(parsed.target, read_only=not create)
    async with opened as saver:
        await saver.setup()
        yield saver


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
