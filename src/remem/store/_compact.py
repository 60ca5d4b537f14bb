"""Compaction after a delete: the deleted rows' bytes made to leave the database's files, checked.

SQLite: the keyword index merged, VACUUM, and the WAL checkpointed and truncated, which waits for
connections that still read old pages. PostgreSQL: VACUUM FULL of every ``remem_`` table and of the column
statistics, after waiting for transactions that can still see the deleted rows; a rewrite is checked (new
relation files, no dead row kept), never assumed. What can outlive it is listed in ``outlives``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remem.errors import StorageError

if TYPE_CHECKING:
    from remem.store._base import RememStoreBase

__all__ = ["POSTGRES_OUTLIVES", "SQLITE_OUTLIVES", "Compaction", "compact"]


@dataclass
class Compaction:
    """The outcome of :meth:`~remem.store.RememStoreBase.compact`: ``done`` only when it was checked;
    ``detail`` says what happened; ``outlives`` what can still hold copies of the deleted rows."""

    done: bool
    detail: str
    outlives: list[str]


SQLITE_OUTLIVES = [
    "copies made before the erasure (backups, copies of the file)",
    "blocks the file system freed when the file shrank, until the disk reuses them",
]
POSTGRES_OUTLIVES = [
    "WAL segments in pg_wal, until the server recycles them after later checkpoints",
    "WAL archives, base backups, pg_dump files and replicas made or fed before the erasure",
    "blocks the file system freed with the old table files, until the disk reuses them",
]


def compact(store: RememStoreBase, *, wait: float) -> Compaction:
    """Rewrite storage so that deleted rows' bytes leave the database's files, waiting up to ``wait`` s for
    other connections that still need the old rows; say plainly when that could not be done."""
    with store._lock:
        if store.dialect.name == "sqlite":
            return _compact_sqlite(store, wait)
        return _compact_postgres(store, wait)


def _compact_sqlite(store: Any, wait: float) -> Compaction:
    conn = store.conn
    deadline = time.monotonic() + wait
    # Every wait inside (the write lock for VACUUM, readers for the checkpoint) stays within ``wait``.
    conn.execute(f"PRAGMA busy_timeout = {int(max(wait, 0.0) * 1000)}")
    try:
        try:
            store._compact()  # merges the keyword index, VACUUMs
        except StorageError as exc:
            return Compaction(False, str(exc), SQLITE_OUTLIVES)
        while True:
            # (busy, frames in the WAL, frames copied back): (0, 0, 0) once the WAL is emptied and truncated,
            # which a connection reading an older snapshot prevents (it may still read the old pages).
            busy, log, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy and log == copied:
                return Compaction(True, "VACUUM done and the WAL checkpointed and truncated", SQLITE_OUTLIVES)
            if time.monotonic() >= deadline:
                return Compaction(
                    False,
                    "another connection to the file holds a read transaction, so the old pages could not be "
                    f"overwritten (waited {wait:g} s); close it, or wait longer with --wait",
                    SQLITE_OUTLIVES,
                )
            time.sleep(0.05)
    finally:
        conn.execute("PRAGMA busy_timeout = 10000")


_HOLDERS = """
SELECT 'session ' || pid FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND backend_type <> 'autovacuum worker'
  AND (((datname = current_database() OR backend_type = 'walsender')
        AND backend_xmin IS NOT NULL AND age(backend_xmin) > age(%s::xid))
    -- a running transaction's id holds rows back in every database of the server
    OR (backend_xid IS NOT NULL AND age(backend_xid) > age(%s::xid)))
UNION ALL
SELECT 'prepared transaction ' || gid FROM pg_prepared_xacts
WHERE database = current_database() AND age(transaction) > age(%s::xid)
UNION ALL
SELECT 'replication slot ' || slot_name FROM pg_replication_slots
WHERE (xmin IS NOT NULL AND age(xmin) > age(%s::xid))
   OR (catalog_xmin IS NOT NULL AND age(catalog_xmin) > age(%s::xid))
"""
_RELFILES = """
SELECT c.oid::regclass::text, c.relfilenode FROM pg_class c
WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace AND c.relname LIKE 'remem\\_%'
UNION ALL SELECT 'pg_catalog.pg_statistic', relfilenode FROM pg_class WHERE oid = 'pg_catalog.pg_statistic'::regclass
"""
_STATISTIC = "pg_catalog.pg_statistic"
_KEPT = re.compile(r"^(\d+) dead row versions cannot be removed yet")


def _vacuum_full(
    conn: Any, wait: float, current: list[str], on_notice: Callable[[Any], None]
) -> tuple[dict[str, int], dict[str, int]]:
    """VACUUM FULL every remem table, then pg_statistic; their relation file numbers before and after."""
    before = dict(conn.execute(_RELFILES).fetchall())
    conn.execute(f"SET lock_timeout = {max(int(wait * 1000), 1)}")
    conn.add_notice_handler(on_notice)
    try:
        for table in [t for t in before if t != _STATISTIC] + [_STATISTIC]:
            current[0] = table
            # ANALYZE replaces the tables' column samples; pg_statistic, rewritten last, drops the old ones.
            options = "FULL, VERBOSE" if table == _STATISTIC else "FULL, ANALYZE, VERBOSE"
            conn.execute(f"VACUUM ({options}) {table}")
    finally:
        conn.remove_notice_handler(on_notice)
        conn.execute("RESET lock_timeout")
    return before, dict(conn.execute(_RELFILES).fetchall())


def _compact_postgres(store: Any, wait: float) -> Compaction:
    with store._connection() as conn:  # the store's connection, or one borrowed from its pool
        return _compact_postgres_on(conn, wait)


def _compact_postgres_on(conn: Any, wait: float) -> Compaction:
    import psycopg

    deadline = time.monotonic() + wait
    kept: dict[str, int] = {}
    current = [""]

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        found = _KEPT.match(diag.message_detail or "")
        if found:
            kept[current[0]] = kept.get(current[0], 0) + int(found.group(1))

    try:
        # A transaction id newer than every deletion: a snapshot older than it may still see deleted rows,
        # and VACUUM FULL copies rows some snapshot can see.
        row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        marker = str(int(row[0]) % 2**32) if row else "0"
        while True:
            holders = [r[0] for r in conn.execute(_HOLDERS, [marker] * 5).fetchall()]
            if not holders:
                kept.clear()
                before, after = _vacuum_full(conn, wait, current, on_notice)
                if not any(n for t, n in kept.items() if t != _STATISTIC):
                    break
                holders = ["a transaction"]  # VACUUM saw one that the check above could not
            if time.monotonic() >= deadline:
                return Compaction(
                    False,
                    f"{', '.join(holders)} still see rows from before the erasure (waited {wait:g} s), so "
                    "VACUUM FULL keeps their bytes; end those transactions and run forget again",
                    POSTGRES_OUTLIVES,
                )
            time.sleep(0.2)
    except psycopg.errors.LockNotAvailable:
        return Compaction(
            False,
            f"another session kept a lock on a remem table for {wait:g} s, so VACUUM FULL could not run; "
            "run forget again when it is idle",
            POSTGRES_OUTLIVES,
        )
    except psycopg.Error as exc:
        return Compaction(False, f"VACUUM FULL failed: {exc}", POSTGRES_OUTLIVES)
    # VACUUM skips, with a warning only, a table this role may not vacuum: a new file proves the rewrite.
    skipped = sorted(t for t in before if after.get(t) == before[t] and t != _STATISTIC)
    if skipped:
        return Compaction(
            False,
            f"VACUUM FULL did not rewrite {', '.join(skipped)} (this role may not vacuum them); run "
            "forget as the tables' owner or the database owner",
            POSTGRES_OUTLIVES,
        )
    outlives = list(POSTGRES_OUTLIVES)
    if after.get(_STATISTIC) == before[_STATISTIC] or kept.get(_STATISTIC):
        # Catalog rows wait for the oldest transaction of the whole server, and need the database owner.
        outlives.append(
            "old column statistics samples (pg_statistic), until it is vacuumed again by its owner once "
            "older transactions on the server have ended"
        )
    return Compaction(
        True,
        f"VACUUM FULL rewrote {len(before) - 1} tables and their indexes, statistics re-sampled",
        outlives,
    )
