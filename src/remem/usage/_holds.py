"""Holds: what model calls in flight take of their scopes' budgets, so that processes sharing a budget
cannot all pass it at once.

A budget check reads what a scope spent from the ledger; a call still running has spent nothing there
yet. Without holds, six processes of one user each read the same total, each pass, and together pay
past the budget. So a call that a turn, thread or user-day budget could refuse is *held* before it is
sent, in one transaction (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock per scope, in one
order):

1. read what the call's scopes spent (their running totals) and what other calls hold of them;
2. check the budgets against both (the caller's ``fits``); when they do not fit, hold nothing;
3. else hold what the call is expected to spend (its counted input, plus the output its scopes' calls
   averaged so far), one row per scope.

After the call its ledger row is written and its hold removed in one transaction (:func:`settle`); a call
that fails removes its hold (:func:`release`). A process that dies in between leaves its hold behind: it
expires ``seconds`` after it was last renewed, on the database's clock (the same for every process,
whatever its own clock says), so a crash holds a budget for that long at most, never for ever. While the
call runs its process renews the hold (:class:`Renewals`, :func:`renew`), so a call longer than
``seconds`` keeps counting in other processes' checks until it settles.

On PostgreSQL a model call waits on the server three times for all this: the hold in two (:func:`hold`,
pipelined as every remem transaction there is, :func:`remem._statements.pipelined`: ``BEGIN``, the locks,
the removal of expired holds and the read wait once, then the insert and ``COMMIT``), taken by the
precheck before the turn's input is stored (:meth:`remem.usage._gate.Gate.precheck`: its check is the
hold's own read), and the settle as one statement (:func:`remem.usage._sql.settle_postgres`).

The programs here are programs of :mod:`remem._statements` (as :func:`remem.usage.forget_usage` is); a
backend runs each in one transaction (``Ledger._transact``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from remem._clock import database_now
from remem._statements import Program, Statement, rowcount
from remem.errors import RememError
from remem.layout import USAGE_HOLDS_TABLE, USAGE_TOTALS_TABLE
from remem.usage._records import Totals

__all__ = [
    "HOLDS_TABLE",
    "Key",
    "More",
    "Renewals",
    "hold",
    "hold_statements",
    "holds_schema",
    "release",
    "renew",
    "select_spent",
    "settle",
    "spent_of",
]

HOLDS_TABLE = USAGE_HOLDS_TABLE
RENEW_FOR = 6  # hold lifetimes a call is renewed for at most: a hold its caller never ends still expires

log = logging.getLogger("remem.usage")

Key = tuple[str, str, str]
"""A running total's key: scope (``thread``, ``turn``, ``user_day``), key1, key2 (as the totals table)."""

_SUMS = "calls, input_tokens, output_tokens, cached_tokens, cost, unpriced, latency_ms"


def holds_schema(real: str) -> tuple[str, ...]:
    """The holds table (ledger schema v4): one row per held scope of a call in flight."""
    return (
        f"CREATE TABLE {HOLDS_TABLE} (scope TEXT NOT NULL, key1 TEXT NOT NULL, key2 TEXT NOT NULL, "
        f"hold TEXT NOT NULL, tokens INTEGER NOT NULL, cost {real} NOT NULL, expires_at {real} NOT NULL, "
        "PRIMARY KEY (scope, key1, key2, hold))",
        f"CREATE INDEX {HOLDS_TABLE}_hold ON {HOLDS_TABLE} (hold)",
    )


def _ph(dialect: str) -> str:
    return "?" if dialect == "sqlite" else "%s"


def _matching(dialect: str, n: int) -> str:
    ph = _ph(dialect)
    return "(" + " OR ".join([f"(scope = {ph} AND key1 = {ph} AND key2 = {ph})"] * n) + ")"


@lru_cache(maxsize=16)
def _select_spent_sql(dialect: str, n: int) -> str:
    where = _matching(dialect, n)
    return (
        f"SELECT scope, {_SUMS}, 0, 0.0 FROM {USAGE_TOTALS_TABLE} WHERE {where} UNION ALL "
        f"SELECT scope, 0, 0, 0, 0, 0.0, 0, 0.0, sum(tokens), sum(cost) FROM {HOLDS_TABLE} "
        f"WHERE {where} AND expires_at > {database_now(dialect)} GROUP BY scope"
    )


def select_spent(dialect: str, keys: Sequence[Key]) -> tuple[str, tuple[Any, ...]]:
    """One read of what ``keys`` spent (their running totals) and hold (unexpired holds): rows that start
    with their scope, for :func:`spent_of`."""
    params = tuple(value for key in keys for value in key)
    return _select_spent_sql(dialect, len(keys)), params + params


def spent_of(rows: Sequence[Sequence[Any]], keys: Sequence[Key]) -> dict[str, Totals]:
    """The Totals of each key's scope from :func:`select_spent`'s rows (a scope with none: all 0)."""
    found: dict[str, list[Any]] = {}
    for row in rows:
        sums = found.setdefault(str(row[0]), [0, 0, 0, 0, 0.0, 0, 0.0, 0, 0.0])
        for i, value in enumerate(row[1:]):
            sums[i] += value or 0
    empty = [0, 0, 0, 0, 0.0, 0, 0.0, 0, 0.0]
    totals: dict[str, Totals] = {}
    for scope, _, _ in keys:
        s = found.get(scope, empty)
        totals[scope] = Totals(
            None, int(s[0]), int(s[1]), int(s[2]), int(s[3]), float(s[4]), int(s[5]), float(s[6]),
            int(s[7]), float(s[8]),
        )  # fmt: skip
    return totals


def _lock_key(key: Key) -> int:
    """A 64-bit advisory lock key of one running total (hashed as remem's leases hash theirs)."""
    digest = hashlib.blake2b(b"remem:usage:" + "\x00".join(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@lru_cache(maxsize=16)
def _hold_sql(dialect: str, n: int) -> tuple[str | None, str, str]:
    """The SQL text of a hold of ``n`` keys: PostgreSQL's advisory locks (None on SQLite), the expired
    holds' removal and the insert (the text depends on the dialect and ``n`` only: built once)."""
    ph = _ph(dialect)
    now = database_now(dialect)
    locks = f"SELECT {', '.join(['pg_advisory_xact_lock(%s)'] * n)}" if dialect == "postgres" else None
    expired = f"DELETE FROM {HOLDS_TABLE} WHERE {_matching(dialect, n)} AND expires_at <= {now}"
    row = f"({ph}, {ph}, {ph}, {ph}, {ph}, {ph}, {now} + {ph})"
    insert = (
        f"INSERT INTO {HOLDS_TABLE} (scope, key1, key2, hold, tokens, cost, expires_at) "
        f"VALUES {', '.join([row] * n)}"
    )
    return locks, expired, insert


def _insert(
    dialect: str, keys: Sequence[Key], hold_id: str, tokens: int, cost: float, seconds: float
) -> Statement:
    values = (hold_id, int(tokens), float(cost), float(seconds))
    params = tuple(value for key in keys for value in (*key, *values))
    return Statement(_hold_sql(dialect, len(keys))[2], params, "none")


def hold_statements(
    dialect: str, keys: Sequence[Key], hold_id: str, *, tokens: int, cost: float, seconds: float
) -> tuple[list[Statement], Statement, Statement]:
    """A hold's statements: what comes before its read (PostgreSQL: the scopes' advisory locks, in one
    order, then the expired holds' removal), the read (:func:`select_spent`), and the insert of the hold
    when the call fits. None needs its row count: a backend may send them without waiting on each."""
    before, read = _reading(dialect, keys)
    return before, read, _insert(dialect, keys, hold_id, tokens, cost, seconds)


def _reading(dialect: str, keys: Sequence[Key]) -> tuple[list[Statement], Statement]:
    locks, expired, _ = _hold_sql(dialect, len(keys))
    flat = tuple(value for key in keys for value in key)
    before = [Statement(expired, flat, "none")]
    if locks is not None:  # SQLite's BEGIN IMMEDIATE serialises every writer already
        before.insert(0, Statement(locks, tuple(_lock_key(k) for k in sorted(keys)), "none"))
    return before, Statement(_select_spent_sql(dialect, len(keys)), flat + flat)


More = Callable[[Mapping[str, Totals]], tuple[int, float]]
"""What a hold adds to its tokens and cost once it has read what its scopes spent (the output a call is
expected to add, which the scopes' calls so far tell)."""


def hold(
    dialect: str,
    keys: Sequence[Key],
    hold_id: str,
    *,
    tokens: int,
    cost: float,
    seconds: float,
    fits: Callable[[Mapping[str, Totals]], bool],
    more: More | None = None,
) -> Program[tuple[bool, dict[str, Totals]]]:
    """Hold ``tokens`` and ``cost`` (and ``more`` of what was read) of every key for ``seconds`` when
    ``fits`` says the call fits in what the keys spent and hold; returns whether it held, and what was
    read (before this hold)."""
    before, read = _reading(dialect, keys)
    for statement in before:  # noqa: UP028 (each is sent its rows, which a list cannot take)
        yield statement
    rows = yield read
    spent = spent_of(rows, keys)
    if not fits(spent):
        return False, spent
    extra_tokens, extra_cost = more(spent) if more is not None else (0, 0.0)
    yield _insert(dialect, keys, hold_id, tokens + extra_tokens, cost + extra_cost, seconds)
    return True, spent


def release(dialect: str, hold_id: str) -> Program[None]:
    """Remove a call's hold (nothing when it expired, or was settled, already)."""
    yield from rowcount(f"DELETE FROM {HOLDS_TABLE} WHERE hold = {_ph(dialect)}", (hold_id,))


def renew(dialect: str, hold_id: str, seconds: float) -> Program[None]:
    """Make a call's hold last ``seconds`` from now (nothing when it expired, or was settled, already:
    another process may have counted the budget free since, so it is not taken back)."""
    now = database_now(dialect)
    ph = _ph(dialect)
    yield from rowcount(
        f"UPDATE {HOLDS_TABLE} SET expires_at = {now} + {ph} WHERE hold = {ph} AND expires_at > {now}",
        (float(seconds), hold_id),
    )


class Renewals:
    """The holds of one gate's calls in flight, each renewed (``renew(hold_id)``) every quarter of
    ``seconds`` until :meth:`stop` (the hold was settled or released), for at most :data:`RENEW_FOR`
    lifetimes. A process that dies renews nothing, so its holds still expire.

    One thread renews every hold of the gate, started with the first hold and ended once none is left
    for a whole quarter: a call's :meth:`start` and :meth:`stop` are a dict entry each, not a thread
    (which cost most of what the ledger adds to a cheap turn)."""

    def __init__(self, renew: Callable[[str], None], seconds: float) -> None:
        self._renew, self._every = renew, seconds / 4
        self._due: dict[str, tuple[float, int]] = {}  # hold -> (next renewal, renewals left)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, hold_id: str) -> None:
        with self._lock:
            # A hold's first renewal is never earlier than one already due, so the thread's wait stands.
            self._due[hold_id] = (time.monotonic() + self._every, 4 * RENEW_FOR)
            if self._thread is None or not self._thread.is_alive():  # none yet, idle, or lost to a fork
                self._thread = threading.Thread(target=self._run, name="remem-hold-renewal", daemon=True)
                self._thread.start()

    def stop(self, hold_id: str) -> None:
        with self._lock:
            self._due.pop(hold_id, None)

    def _run(self) -> None:
        idle_since: float | None = None
        while True:
            now = time.monotonic()
            with self._lock:
                if self._due:
                    idle_since = None
                else:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= self._every:
                        self._thread = None
                        return
                due, wait = self._take_due(now)
            for hold in due:
                self._renew_one(hold)
            time.sleep(max(wait, 0.0))

    def _take_due(self, now: float) -> tuple[list[str], float]:
        """The holds due for renewal now (each set to its next one), and how long until the next is due."""
        due = [hold for hold, (at, _) in self._due.items() if at <= now]
        for hold in due:
            left = self._due[hold][1] - 1
            if left > 0:
                self._due[hold] = (now + self._every, left)
            else:
                del self._due[hold]  # a hold its caller never ends still expires
        return due, min((at for at, _ in self._due.values()), default=now + self._every) - now

    def _renew_one(self, hold_id: str) -> None:
        try:
            self._renew(hold_id)
        except RememError as exc:  # left to expire: the call is then under-counted, as before
            log.warning("a budget hold could not be renewed (%s); it expires on its own", exc)
            self.stop(hold_id)


def settle(dialect: str, record: tuple[str, tuple[Any, ...]], hold_id: str) -> Program[None]:
    """Write a paid call's ledger row (``record``: its statement, which adds the row to its running totals)
    and remove its hold, together: no moment counts the call twice, or not at all. (remem's PostgreSQL
    ledger settles in one statement of its own, :func:`remem.usage._sql.settle_postgres`.)"""
    yield Statement(*record, fetch="none")
    yield from release(dialect, hold_id)
