"""The ledger's interface: a backend runs SQL (two methods); recording and every query live here."""

from __future__ import annotations

import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from remem._statements import Program, Statement, drive
from remem.errors import ArgumentTypeError, RememUsageError
from remem.usage import _holds, _sql
from remem.usage._records import Totals, UsageEvent, day_of
from remem.usage._sql import Filters

__all__ = ["LazyLedger", "Ledger", "scope_keys"]


class Ledger(ABC):
    """Where every model call's usage goes, queryable across threads and users.

    A backend implements :meth:`_write` and :meth:`_read`; :meth:`setup` applies the schema through
    :mod:`remem._migrate`. All methods are thread-safe. ``dialect`` is ``"sqlite"`` or ``"postgres"``.
    """

    dialect: str = "sqlite"

    @abstractmethod
    def setup(self) -> None:
        """Create or upgrade the ledger's table (idempotent, safe from many processes)."""

    @abstractmethod
    def _write(self, sql: str, params: tuple[Any, ...]) -> None: ...

    def _write_if_new(
        self, first: tuple[str, tuple[Any, ...]], then: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> None:
        """Run ``first``; when it returned a row, run ``then`` (remem's backends: in one transaction)."""
        if self._read(*first):
            for statement in then:
                self._write(*statement)

    @abstractmethod
    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]: ...

    def _dialect(self) -> str:
        return self.dialect

    def close(self) -> None:  # noqa: B027 - optional: most backends own nothing more to release
        """Release the connection (a ledger opened on a connection it does not own leaves it open)."""

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, event: UsageEvent) -> None:
        """Add one call, and add it to its thread's, turn's and user's day running totals, in one
        transaction; a second record with the same ``call_id`` adds nothing."""
        self._record_event(event)

    def _record_event(self, event: UsageEvent) -> None:
        dialect = self._dialect()
        self._write_if_new(_sql.insert(dialect, event), _sql.add_to_totals(dialect, event))

    def events(
        self,
        *,
        thread_id: str | None = None,
        user_id: str | None = None,
        turn: int | None = None,
        since: float | None = None,
        kind: str | None = None,
        limit: int | None = None,
        id_prefix: str | None = None,
    ) -> list[UsageEvent]:
        """The recorded calls, oldest first; at most ``limit`` of them (None: all). ``id_prefix``: only the
        calls of threads or users whose ids begin with it (a server tenant's)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ArgumentTypeError(
                f"limit is a whole number of calls such as limit=50, or None; got {limit!r}"
            )
        if limit is not None and limit < 0:
            raise RememUsageError(f"limit must be 0 or more (None: all the calls); got {limit}")
        filters = Filters(
            thread_id=thread_id, user_id=user_id, turn=turn, since=since, kind=kind, id_prefix=id_prefix
        )
        rows = self._read(*_sql.select_events(self._dialect(), filters, limit))
        return [_sql.event_of(row) for row in rows]

    def totals(
        self,
        *,
        by: str | None = None,
        thread_id: str | None = None,
        user_id: str | None = None,
        turn: int | None = None,
        day: str | None = None,
        since: float | None = None,
        kind: str | None = None,
        id_prefix: str | None = None,
    ) -> list[Totals]:
        """Sums grouped ``by`` turn, thread, model, day, user or kind (one row for all when None);
        ``id_prefix`` as in :meth:`events`."""
        filters = Filters(
            thread_id=thread_id,
            user_id=user_id,
            turn=turn,
            day=day,
            since=since,
            kind=kind,
            id_prefix=id_prefix,
        )
        rows: Sequence[tuple[Any, ...]] = self._read(*_sql.select_totals(self._dialect(), filters, by))
        return [_sql.totals_of(row, by) for row in rows]

    def spent(
        self,
        *,
        thread_id: str | None = None,
        user_id: str | None = None,
        turn: int | None = None,
        day: str | None = None,
    ) -> Totals:
        """What the matching calls spent (what a budget is checked against). A thread, a thread's turn and
        a user's day are read from their running totals: one row, however many calls they made."""
        filters = Filters(thread_id=thread_id, user_id=user_id, turn=turn, day=day)
        running = _sql.select_running_totals(self._dialect(), filters)
        if running is None:
            return self.totals(thread_id=thread_id, user_id=user_id, turn=turn, day=day)[0]
        rows = self._read(*running)
        return _running(rows[0], 0) if rows else _NONE

    def spent_in(
        self,
        scopes: Sequence[str],
        *,
        thread_id: str | None = None,
        turn: int | None = None,
        user_id: str | None = None,
        at: float | None = None,
    ) -> dict[str, Totals]:
        """What a call's ``scopes`` spent (``turn``, ``thread``, ``user_day``: of ``user_id`` on the UTC
        day of ``at``, default today), read from their running totals in one query, with what calls in
        flight hold of them (``held_tokens``, ``held_cost``). A scope whose key is not given is left out."""
        keys = scope_keys(scopes, thread_id=thread_id, turn=turn, user_id=user_id, at=at)
        if not keys:
            return {}
        return _holds.spent_of(self._read(*_holds.select_spent(self._dialect(), keys)), keys)

    # -- holds: budgets that hold across processes (remem.usage._holds) ---------------------------
    def hold(
        self,
        keys: Sequence[_holds.Key],
        *,
        tokens: int,
        cost: float,
        seconds: float,
        fits: Callable[[Mapping[str, Totals]], bool],
        more: _holds.More | None = None,
    ) -> tuple[str | None, dict[str, Totals]]:
        """In one transaction: read what ``keys`` (:func:`scope_keys`) spent and what calls in flight hold
        of them; when ``fits`` says the call fits, hold ``tokens`` and ``cost`` (plus ``more`` of what was
        read) of each for at most ``seconds`` (database clock). Returns the hold's id (None: nothing
        held) and what was read."""
        hold_id = uuid.uuid4().hex
        held, spent = self._transact(
            _holds.hold(
                self._dialect(),
                keys,
                hold_id,
                tokens=tokens,
                cost=cost,
                seconds=seconds,
                fits=fits,
                more=more,
            )
        )
        return (hold_id if held else None), spent

    def settle(self, event: UsageEvent, hold_id: str) -> None:
        """:meth:`record` the held call and remove its hold, in one transaction."""
        dialect = self._dialect()
        record = _sql.record_sqlite(event) if dialect == "sqlite" else _sql.record_postgres(event)
        self._transact(_holds.settle(dialect, record, hold_id))

    def release(self, hold_id: str) -> None:
        """Remove a hold whose call was not paid (it failed, or was not sent)."""
        self._transact(_holds.release(self._dialect(), hold_id))

    def renew(self, hold_id: str, seconds: float) -> None:
        """Make a hold of a call still running last ``seconds`` from now (nothing once it is gone)."""
        self._transact(_holds.renew(self._dialect(), hold_id, seconds))

    def _transact(self, program: Program[_T]) -> _T:
        """Run a program of :mod:`remem._statements` in one write transaction. remem's backends do (SQLite:
        ``BEGIN IMMEDIATE``); this default runs it statement by statement, for a backend that has only
        :meth:`_read` and :meth:`_write` (a row count it cannot know is sent as 0)."""

        def reply(statement: Statement) -> list[tuple[Any, ...]]:
            if statement.fetch == "all":
                return self._read(statement.sql, tuple(statement.params))
            self._write(statement.sql, tuple(statement.params))
            return [(0,)]

        return drive(program, reply)

    def user_day(self, user_id: str, at: float | None = None) -> Totals:
        """What ``user_id`` spent on the UTC day of ``at`` (default: today)."""
        return self.spent(user_id=user_id, day=day_of(time.time() if at is None else at))


_NONE = Totals()
_T = TypeVar("_T")


def scope_keys(
    scopes: Sequence[str],
    *,
    thread_id: str | None,
    turn: int | None,
    user_id: str | None,
    at: float | None = None,
) -> list[_holds.Key]:
    """The running totals' keys of a call's ``scopes`` (a scope whose key is not given is left out)."""
    keys: list[_holds.Key] = []
    if thread_id is not None and "thread" in scopes:
        keys.append(("thread", thread_id, ""))
    if thread_id is not None and turn is not None and "turn" in scopes:
        keys.append(("turn", thread_id, str(turn)))
    if user_id is not None and "user_day" in scopes:
        keys.append(("user_day", user_id, day_of(time.time() if at is None else at)))
    return keys


def _running(row: Sequence[Any], at: int) -> Totals:
    """The Totals of a running-totals row whose sums start at ``at`` (its columns are typed INTEGER and
    REAL / DOUBLE PRECISION NOT NULL, so the driver already gives ints and floats)."""
    return Totals(None, *row[at:])


class LazyLedger(Ledger):
    """A ledger opened on first use by ``opener`` (so that building an agent, or a read-only command,
    creates no table and opens no connection). Thread-safe; :meth:`close` closes what was opened."""

    def __init__(
        self, opener: Callable[[], Ledger], *, prepare: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._opener: Callable[[], Ledger] | None = opener
        self._prepare = prepare
        self._inner: Ledger | None = None
        self._lock = threading.Lock()

    @property
    def opened(self) -> bool:
        return self._inner is not None

    def inner(self) -> Ledger:
        """The real ledger, opened now if it was not yet."""
        inner = self._inner
        if inner is not None:
            return inner
        with self._lock:
            if self._inner is None:
                if self._opener is None:
                    raise RememUsageError("this usage ledger was closed; open a new one")
                self._inner = self._opener()
            return self._inner

    async def aprepare(self) -> None:
        """Find, from async code, what the opener needs before a sync call opens it (an ``aiosqlite``
        owner's file: see :func:`~remem.usage.ledger_for`); nothing once opened."""
        if self._prepare is not None and self._inner is None:
            await self._prepare()

    def setup(self) -> None:
        self.inner().setup()

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        self.inner()._write(sql, params)

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.inner()._read(sql, params)

    def _dialect(self) -> str:
        return self.inner().dialect

    def _record_event(self, event: UsageEvent) -> None:
        self.inner()._record_event(event)

    def _transact(self, program: Program[_T]) -> _T:
        return self.inner()._transact(program)

    def hold(
        self,
        keys: Sequence[_holds.Key],
        *,
        tokens: int,
        cost: float,
        seconds: float,
        fits: Callable[[Mapping[str, Totals]], bool],
        more: _holds.More | None = None,
    ) -> tuple[str | None, dict[str, Totals]]:
        return self.inner().hold(keys, tokens=tokens, cost=cost, seconds=seconds, fits=fits, more=more)

    def settle(self, event: UsageEvent, hold_id: str) -> None:
        self.inner().settle(event, hold_id)

    def close(self) -> None:
        with self._lock:
            inner, self._inner, self._opener = self._inner, None, None
        if inner is not None:
            inner.close()
