"""The queue's schema and every statement it runs, as pure functions (no I/O).

Each operation is a *program* of :mod:`remem._statements`: it yields statements and receives each one's rows
back (a row count through :func:`~remem._statements.rowcount`); its return value is the operation's result.
A backend runs one program in ONE write transaction (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a
transaction that first takes the queue's advisory lock), so each operation is atomic. Erasure runs
:func:`forget_jobs` inside its own transaction, as it runs :func:`remem.usage.forget_usage`.

Times are the database's clock (:func:`now`), never the client's: on PostgreSQL a lease expires by the
server's clock, whatever the clocks of the workers say; on SQLite the clock is the one of the machine that
holds the file, which every process opening it shares (Python's ``time`` is never read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from remem import _migrate
from remem._clock import database_now
from remem._statements import Program, Statement, rowcount
from remem.layout import JOBS_TABLE

__all__ = [
    "COLUMNS",
    "JOBS",
    "Program",
    "claim",
    "complete",
    "drop_waiting",
    "enqueue",
    "fail",
    "forget_jobs",
    "heartbeat",
    "list_jobs",
    "now",
    "park",
    "retry",
    "status_counts",
]

T = JOBS_TABLE
_CHUNK = 500  # ids bound in one statement

# The statuses a job goes through: queued -> running -> done, or back to queued (a retry after a
# failure, with backoff), or parked (failed max_attempts times, or parked by hand; kept with its error).
STATUSES = ("queued", "running", "done", "parked")


def _schema(real: str, seq: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE {T} ("
        f"seq {seq}, id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, payload TEXT, "
        "input_key TEXT, serial_key TEXT, user_id TEXT, thread_id TEXT, "
        "status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL, "
        f"run_after {real} NOT NULL, lease_until {real}, lease_owner TEXT, last_error TEXT, "
        f"created_at {real} NOT NULL, updated_at {real} NOT NULL, finished_at {real})",
        # One live job per input: enqueueing the same input again returns the job that has it.
        f"CREATE UNIQUE INDEX {T}_input ON {T} (input_key) WHERE status <> 'parked'",
        f"CREATE INDEX {T}_ready ON {T} (status, run_after)",
        f"CREATE INDEX {T}_user ON {T} (user_id)",
        f"CREATE INDEX {T}_thread ON {T} (thread_id)",
    )


# ``seq``: the order jobs were queued in (a thread's jobs run in it).
JOBS = _migrate.Component(
    "jobs",
    sqlite=(_schema("REAL", "INTEGER PRIMARY KEY AUTOINCREMENT"),),
    postgres=(_schema("DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY"),),
)

COLUMNS = (
    "id, kind, payload, input_key, serial_key, user_id, thread_id, status, attempts, max_attempts, "
    "run_after, lease_until, lease_owner, last_error, created_at, updated_at, finished_at"
)
_J_COLUMNS = ", ".join(f"j.{c.strip()}" for c in COLUMNS.split(","))


def now(dialect: str) -> str:
    """The database's clock in seconds since the epoch, as an SQL expression."""
    return database_now(dialect)


def _ph(dialect: str, sql: str) -> str:
    return sql if dialect == "sqlite" else sql.replace("?", "%s")


def enqueue(
    dialect: str,
    *,
    job_id: str,
    kind: str,
    payload: Any,
    input_key: str | None,
    serial_key: str | None,
    user_id: str | None,
    thread_id: str | None,
    max_attempts: int,
    delay: float,
) -> Program[Any]:
    """Add a job; returns its id, or the id of the live job that already has ``input_key``."""
    clock = now(dialect)
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
    added = yield from rowcount(
        _ph(
            dialect,
            f"INSERT INTO {T} (id, kind, payload, input_key, serial_key, user_id, thread_id, status, "
            "attempts, max_attempts, run_after, created_at, updated_at) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, {clock} + ?, {clock}, {clock}) "
            "ON CONFLICT (input_key) WHERE status <> 'parked' DO NOTHING",
        ),
        (job_id, kind, text, input_key, serial_key, user_id, thread_id, max_attempts, float(delay)),
    )
    if added:
        return job_id
    rows = yield Statement(
        _ph(dialect, f"SELECT id FROM {T} WHERE input_key = ? AND status <> 'parked'"), (input_key,)
    )
    return str(rows[0][0])


def claim(dialect: str, *, owner: str, lease: float, kinds: Sequence[str] | None) -> Program[Any]:
    """Take the next ready job for ``owner`` for ``lease`` seconds; returns its row, or None.

    Ready: queued and due, or running under a lease that expired (its worker died). A job whose
    worker died ``max_attempts`` times is parked instead of run again. Jobs that share a ``serial_key``
    (a thread's) run one at a time, in order.
    """
    clock = now(dialect)
    yield from rowcount(
        f"UPDATE {T} SET status = 'parked', lease_owner = NULL, lease_until = NULL, updated_at = {clock}, "
        "last_error = 'its worker stopped (no heartbeat until the lease expired) ' || attempts || ' times; "
        "the job may kill its worker: look at it, then `remem queue retry ID`' "
        f"WHERE status = 'running' AND lease_until < {clock} AND attempts >= max_attempts",
        (),
    )
    kind_filter, params = "", tuple[str, ...]()
    if kinds:
        kind_filter = f" AND j.kind IN ({', '.join('?' * len(kinds))})"
        params = tuple(kinds)
    ready = (
        f"SELECT j.id FROM {T} j WHERE ((j.status = 'queued' AND j.run_after <= {clock}) "
        f"OR (j.status = 'running' AND j.lease_until < {clock})){kind_filter} "
        f"AND (j.serial_key IS NULL OR NOT EXISTS (SELECT 1 FROM {T} r WHERE r.serial_key = j.serial_key "
        f"AND r.id <> j.id AND ((r.status = 'running' AND r.lease_until >= {clock}) "
        "OR (r.status IN ('queued', 'running') AND r.seq < j.seq)))) "
        "ORDER BY j.run_after, j.seq LIMIT 1"
    )
    sets = (
        f"status = 'running', attempts = attempts + 1, lease_owner = ?, lease_until = {clock} + ?, "
        f"updated_at = {clock}"
    )
    if dialect == "sqlite":
        sql = f"UPDATE {T} SET {sets} WHERE id = ({ready}) RETURNING {COLUMNS}"
        rows = yield Statement(sql, (owner, float(lease), *params))
    else:
        sql = (
            f"WITH next AS ({ready} FOR UPDATE SKIP LOCKED) "
            f"UPDATE {T} AS j SET {sets} FROM next "
            f"WHERE j.id = next.id RETURNING {_J_COLUMNS}"
        )
        rows = yield Statement(_ph(dialect, sql), (*params, owner, float(lease)))
    return rows[0] if rows else None


def heartbeat(dialect: str, *, job_id: str, owner: str, lease: float) -> Program[Any]:
    """Extend the lease ``owner`` holds on a job; returns whether it still holds it."""
    clock = now(dialect)
    count = yield from rowcount(
        _ph(
            dialect,
            f"UPDATE {T} SET lease_until = {clock} + ?, updated_at = {clock} "
            "WHERE id = ? AND lease_owner = ? AND status = 'running'",
        ),
        (float(lease), job_id, owner),
    )
    return bool(count)


def complete(dialect: str, *, job_id: str, owner: str) -> Program[Any]:
    """Mark the job done if ``owner`` still holds it (its payload is dropped: a done job never runs again)."""
    clock = now(dialect)
    count = yield from rowcount(
        _ph(
            dialect,
            f"UPDATE {T} SET status = 'done', payload = NULL, lease_owner = NULL, lease_until = NULL, "
            f"last_error = NULL, finished_at = {clock}, updated_at = {clock} "
            "WHERE id = ? AND lease_owner = ? AND status = 'running'",
        ),
        (job_id, owner),
    )
    return bool(count)


def fail(dialect: str, *, job_id: str, owner: str, error: str, delay: float) -> Program[Any]:
    """Record a failure: queued again after ``delay`` seconds, or parked once out of attempts.

    Returns the job's new status, or None when ``owner`` no longer held it.
    """
    clock = now(dialect)
    rows = yield Statement(
        _ph(
            dialect,
            f"UPDATE {T} SET status = CASE WHEN attempts >= max_attempts THEN 'parked' ELSE 'queued' END, "
            f"run_after = {clock} + ?, lease_owner = NULL, lease_until = NULL, last_error = ?, "
            f"updated_at = {clock} WHERE id = ? AND lease_owner = ? AND status = 'running' RETURNING status",
        ),
        (float(delay), error, job_id, owner),
    )
    return str(rows[0][0]) if rows else None


def status_counts(dialect: str) -> Program[Any]:
    """``(kind, status, count, oldest created_at, now)`` rows."""
    rows = yield Statement(
        f"SELECT kind, status, count(*), min(created_at), {now(dialect)} FROM {T} "
        "GROUP BY kind, status ORDER BY kind, status",
        (),
    )
    return rows


def list_jobs(dialect: str, *, status: str | None, job_id: str | None, limit: int) -> Program[Any]:
    """The jobs' rows (all columns), newest first."""
    where, params = [], []
    if status is not None:
        where.append("status = ?")
        params.append(status)
    if job_id is not None:
        where.append("id = ?")
        params.append(job_id)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = yield Statement(
        _ph(dialect, f"SELECT {COLUMNS} FROM {T}{clause} ORDER BY seq DESC LIMIT ?"), (*params, int(limit))
    )
    return rows


def retry(dialect: str, *, job_id: str | None) -> Program[Any]:
    """Queue parked jobs again, now, with their attempts reset (one job, or every parked one).

    A parked job whose input another live job already has is left parked (that job does the work).
    """
    clock = now(dialect)
    one, params = (" AND p.id = ?", (job_id,)) if job_id is not None else ("", ())
    count = yield from rowcount(
        _ph(
            dialect,
            f"UPDATE {T} SET status = 'queued', attempts = 0, run_after = {clock}, updated_at = {clock} "
            f"WHERE id IN (SELECT p.id FROM {T} p WHERE p.status = 'parked'{one} AND (p.input_key IS NULL "
            f"OR NOT EXISTS (SELECT 1 FROM {T} o WHERE o.input_key = p.input_key AND o.status <> 'parked')))",
        ),
        params,
    )
    return int(count)


def park(dialect: str, *, job_id: str | None, kind: str | None, reason: str) -> Program[Any]:
    """Park a queued job (or every queued job of ``kind``) by hand, with ``reason`` as its error; returns
    how many were parked. A running job is not taken from its worker: stop the worker, then park it."""
    clock = now(dialect)
    column, value = ("id", job_id) if job_id is not None else ("kind", kind)
    count = yield from rowcount(
        _ph(
            dialect,
            f"UPDATE {T} SET status = 'parked', last_error = ?, updated_at = {clock} "
            f"WHERE {column} = ? AND status = 'queued'",
        ),
        (reason, value),
    )
    return int(count)


def drop_waiting(
    dialect: str,
    *,
    thread_ids: Sequence[str],
    kinds: Sequence[str],
    rewrite: Callable[[str, Any], Any],
) -> Program[int]:
    """Delete the waiting (queued or parked) jobs of ``kinds`` for ``thread_ids`` for which
    ``rewrite(kind, payload)`` returns None; one it returns another payload for is kept with that payload.
    Returns how many were deleted or rewritten. A running job is left to its worker."""
    changed = 0
    threads = sorted(set(thread_ids))
    kind_marks = ", ".join("?" * len(kinds))
    for i in range(0, len(threads), _CHUNK):
        chunk = tuple(threads[i : i + _CHUNK])
        marks = ", ".join("?" * len(chunk))
        rows = yield Statement(
            _ph(
                dialect,
                f"SELECT id, kind, payload FROM {T} WHERE thread_id IN ({marks}) AND kind IN ({kind_marks}) "
                "AND status IN ('queued', 'parked') ORDER BY seq",
            ),
            (*chunk, *kinds),
        )
        for job_id, kind, text in rows:
            payload = None if text is None else json.loads(text)
            kept = rewrite(str(kind), payload)
            params: tuple[Any, ...]
            if kept is None:
                sql, params = f"DELETE FROM {T} WHERE id = ?", (job_id,)
            elif kept != payload:
                sql = f"UPDATE {T} SET payload = ?, updated_at = {now(dialect)} WHERE id = ?"
                params = (json.dumps(kept, ensure_ascii=False, sort_keys=True), job_id)
            else:
                continue
            changed += int((yield from rowcount(_ph(dialect, sql), params)))
    return changed


def _exists(dialect: str) -> Program[bool]:
    rows = yield _migrate.table_exists("sqlite" if dialect == "sqlite" else "postgres", T)
    return bool(rows)


def forget_jobs(dialect: str, *, user_id: str | None = None, thread_ids: Sequence[str] = ()) -> Program[int]:
    """Delete every job of ``user_id`` and of ``thread_ids``, whatever their status; returns how many.

    Erasure runs this in its own transaction (the protocol of :func:`remem.usage.forget_usage`); a
    database without a queue is left as it is (0). A job running at that moment loses its row: its worker
    cannot mark it done, and nothing runs it again.
    """
    if not (yield from _exists(dialect)):
        return 0
    removed = 0
    if user_id is not None:
        removed += int((yield from rowcount(_ph(dialect, f"DELETE FROM {T} WHERE user_id = ?"), (user_id,))))
    threads = sorted(set(thread_ids))
    for i in range(0, len(threads), _CHUNK):
        chunk = tuple(threads[i : i + _CHUNK])
        marks = ", ".join("?" * len(chunk))
        removed += int(
            (yield from rowcount(_ph(dialect, f"DELETE FROM {T} WHERE thread_id IN ({marks})"), chunk))
        )
    return removed
