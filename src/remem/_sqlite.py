"""What every part sharing one SQLite file agrees on: how long a writer waits, and what a failure means.

The checkpointer, the store and the usage ledger may all live in one file opened by many processes.
Each connection waits :data:`BUSY_TIMEOUT_MS` for the write lock (write transactions start as writers,
``BEGIN IMMEDIATE``, so the wait applies), and an error is worded here, once: a busy file says that it is
busy and what to do, and is never blamed on permissions.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from remem.errors import StorageError

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["BUSY_TIMEOUT_MS", "aenable_wal", "database_file", "enable_wal", "is_busy", "storage_error"]

BUSY_TIMEOUT_MS: Final = 30_000  # the wait for the write lock, the same for every part of a shared file


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says another connection holds the lock (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc)
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def database_file(conn: sqlite3.Connection) -> str:
    """The file ``conn`` has open, as a message may name it."""
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return "the SQLite database"
    return repr(row[2]) if row and row[2] else "the in-memory SQLite database"


def closed_error(where: str) -> StorageError:
    """The error for a saver, store or ledger used after its ``with`` block closed its connection."""
    return StorageError(
        f"the connection to {where} is closed: the `with` block that opened it has ended (or its context "
        "manager was dropped). Use the saver, and any agent built on it, inside the block: "
        "`with checkpointer_from_url(url) as saver: agent = build_agent(..., checkpointer=saver); run_turn(...)`"
    )


def storage_error(exc: BaseException, *, where: str, doing: str) -> StorageError:
    """The :class:`StorageError` for ``exc``, raised while ``doing`` (e.g. "the checkpoint write") on
    ``where`` (the file): what is busy and what to do, or what else to check."""
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
        return closed_error(where)
    if is_busy(exc):
        return StorageError(
            f"{where} is busy: another process (or connection) holds its write lock and kept it past the "
            f"{BUSY_TIMEOUT_MS / 1000:g} s busy timeout while {doing} waited ({exc}); retry, and look for a "
            "process that keeps a write transaction open (a long import, a stuck tool, a `sqlite3` shell)"
        )
    return StorageError(
        f"SQLite refused {doing} on {where} ({exc}); check that the file is a remem database, not corrupt, "
        "on a disk with space, and writable"
    )


# Changing the journal mode needs the file to itself and does not wait on the busy timeout, so processes
# opening a fresh file at once (a store creating its tables, a saver, a ledger) retry the switch instead.
_WAL = "PRAGMA journal_mode = WAL"


def _wal_waits() -> Iterator[float]:
    """The pauses between attempts to switch to WAL, doubling up to 0.1 s, for :data:`BUSY_TIMEOUT_MS`."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while time.monotonic() < deadline:
        yield delay
        delay = min(delay * 2, 0.1)
    raise sqlite3.OperationalError("database is locked")


def _switched(row: object) -> bool:
    # "memory" is the answer of a database in memory, which has no WAL and needs none.
    return isinstance(row, tuple | sqlite3.Row) and str(row[0]).lower() in ("wal", "memory")


def enable_wal(conn: sqlite3.Connection) -> None:
    """Switch the file of ``conn`` to WAL (readers never wait for the writer), retrying while it is busy."""
    for delay in _wal_waits():
        try:
            if _switched(conn.execute(_WAL).fetchone()):
                return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        time.sleep(delay)


async def aenable_wal(conn: aiosqlite.Connection) -> None:
    """Async version of :func:`enable_wal`."""
    for delay in _wal_waits():
        try:
            async with conn.execute(_WAL) as cursor:
                if _switched(await cursor.fetchone()):
                    return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        await asyncio.sleep(delay)
