"""Fencing tokens: a number per thread lease, moved on each time the lease is taken, in the database that
holds the thread's data. See :mod:`remem._lease`.

A holder keeps the number it got (:attr:`remem._lease.ThreadLease.fence`), and each of its writes reads
the thread's number in the transaction that commits the write (:meth:`~remem._lease.ThreadLease.fenced`)
and writes nothing when it moved on: a holder whose lease the database dropped (a PostgreSQL session
ended, a SQLite lease file replaced) and another writer took since can no longer commit, however late its
write comes. On PostgreSQL the writing transaction reads the row ``FOR SHARE``, so a taker's move waits for
a write under way to commit (and then reads what it wrote); on SQLite both are write transactions, which
the file serialises.

A row is keyed by the lease's 64-bit hash (:func:`lease_key`, the PostgreSQL advisory lock's key), never
by the thread id: it holds no text an erasure would have to remove, and it is never deleted, so a number
never comes back. Two leases whose hashes collide share a number; a taker of one then fences the other's
holder, who fails cleanly and retries.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

from remem import _migrate
from remem._statements import Program, Statement, run_immediate
from remem.layout import THREAD_FENCES_TABLE

__all__ = [
    "CREATE",
    "FENCES",
    "bump_postgres",
    "bump_sqlite",
    "check",
    "lease_key",
    "move_on",
    "take_in_transaction",
]

_TABLE = THREAD_FENCES_TABLE
CREATE = {
    "sqlite": f"CREATE TABLE IF NOT EXISTS {_TABLE} (lease_key INTEGER PRIMARY KEY, fence INTEGER NOT NULL)",
    "postgres": f"CREATE TABLE IF NOT EXISTS {_TABLE} (lease_key BIGINT PRIMARY KEY, fence BIGINT NOT NULL)",
}
"""The table, for a schema whose writes move tokens on in their own transaction (the checkpoints' v4)."""
FENCES = _migrate.Component("lease", sqlite=((CREATE["sqlite"],),), postgres=((CREATE["postgres"],),))
"""The fencing tokens' table, as the one migration runner (:mod:`remem._migrate`) applies it where a lease
is taken."""

_BUMP = (
    f"INSERT INTO {_TABLE} (lease_key, fence) VALUES (?, 1) "
    f"ON CONFLICT (lease_key) DO UPDATE SET fence = {_TABLE}.fence + 1 RETURNING fence"
)
_BUMP_MANY = (
    f"INSERT INTO {_TABLE} (lease_key, fence) SELECT k, 1 FROM unnest(%s::bigint[]) AS k "
    f"ON CONFLICT (lease_key) DO UPDATE SET fence = {_TABLE}.fence + 1"
)


def lease_key(scope: str, thread_id: str) -> int:
    """The lease's signed 64-bit hash: its PostgreSQL advisory lock and its fencing token's row."""
    digest = hashlib.blake2b(f"remem:{scope}:{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def check(key: int, dialect: _migrate.Dialect) -> Statement:
    """The statement a write under a lease runs in its transaction: the thread's number, locked against a
    taker's move until the write commits (SQLite: the write transaction holds the file's write lock)."""
    if dialect == "sqlite":
        return Statement(f"SELECT fence FROM {_TABLE} WHERE lease_key = ?", (key,))
    return Statement(f"SELECT fence FROM {_TABLE} WHERE lease_key = %s FOR SHARE", (key,))


def move_on(key: int, dialect: _migrate.Dialect) -> Statement:
    """The statement a lease that guards one write runs in that write's transaction instead of
    :func:`check`: it moves the number on itself (its taking wrote nothing), so every earlier holder is
    fenced out from that commit on."""
    sql = _BUMP.removesuffix(" RETURNING fence")
    return Statement(sql if dialect == "sqlite" else sql.replace("?", "%s"), (key,), "none")


def take_in_transaction(key: int) -> Statement:
    """PostgreSQL: the lease's advisory lock taken by the transaction that runs this, until it ends; a
    division by zero (the transaction fails, writing nothing) when another session holds it. Sent without
    waiting for its answer, as the write's other statements are."""
    return Statement("SELECT 1 / pg_try_advisory_xact_lock(%s)::int", (key,), "none")


def _bump_program(key: int) -> Program[int]:
    ((fence,),) = yield Statement(_BUMP, (key,))
    return int(fence)


def bump_sqlite(conn: sqlite3.Connection, key: int) -> int:
    """Move the number of ``key`` on, in its own ``BEGIN IMMEDIATE`` transaction on ``conn`` (autocommit
    mode), creating the table in an older file first; the new number."""
    try:
        return run_immediate(conn, _bump_program(key))
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
    _migrate.run_sqlite(conn, FENCES)
    return run_immediate(conn, _bump_program(key))


def bump_postgres(conn: Any, keys: list[int]) -> list[int]:
    """Move the numbers of ``keys`` on, on ``conn`` (a lease session in autocommit mode), creating the
    table in an older database first; the new numbers (one statement, committed before it returns)."""
    import psycopg

    def bump() -> list[int]:
        if len(keys) == 1:
            return [int(conn.execute(_BUMP.replace("?", "%s"), keys).fetchone()[0])]
        conn.execute(_BUMP_MANY, [keys])
        return []

    try:
        return bump()
    except psycopg.errors.UndefinedTable:
        pass
    _migrate.run_postgres(conn, FENCES)
    return bump()
