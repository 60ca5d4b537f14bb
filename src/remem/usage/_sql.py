"""The ledger's schema (one :mod:`remem._migrate` component) and its SQL, built once for both dialects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, cast

from remem import _migrate
from remem._statements import Program, Statement, rowcount
from remem.errors import RememUsageError
from remem.layout import USAGE_LEDGER_TABLE, USAGE_TOTALS_TABLE
from remem.usage._holds import HOLDS_TABLE, holds_schema
from remem.usage._records import Totals, UsageEvent, day_of

__all__ = [
    "BY",
    "COLUMNS",
    "LEDGER",
    "TOTALS_TABLE",
    "TOTALS_TRIGGER",
    "USAGE_TABLE",
    "Filters",
    "UsageForgetting",
    "add_to_totals",
    "forget_usage",
    "insert",
    "record_postgres",
    "record_sqlite",
    "select_events",
    "select_running_totals",
    "select_totals",
    "settle_postgres",
]

USAGE_TABLE = USAGE_LEDGER_TABLE

COLUMNS = (
    "kind",
    "thread_id",
    "user_id",
    "turn",
    "node",
    "model",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "source",
    "latency_ms",
    "cost",
    "at",
    "day",
    "call_id",
)


def _create(key: str, real: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE {USAGE_TABLE} ("
        f"id {key}, kind TEXT NOT NULL, thread_id TEXT, user_id TEXT, turn INTEGER, node TEXT, "
        "model TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, "
        "cached_tokens INTEGER NOT NULL DEFAULT 0, source TEXT NOT NULL, "
        f"latency_ms {real}, cost {real}, at {real} NOT NULL, day TEXT NOT NULL, call_id TEXT UNIQUE)",
        # The budget checks read one thread's turn, one thread, one user's day; the CLI reads by time.
        f"CREATE INDEX {USAGE_TABLE}_thread ON {USAGE_TABLE} (thread_id, turn)",
        f"CREATE INDEX {USAGE_TABLE}_user_day ON {USAGE_TABLE} (user_id, day)",
        f"CREATE INDEX {USAGE_TABLE}_at ON {USAGE_TABLE} (at)",
    )


# Running totals per thread, per (thread, turn) and per (user, UTC day), kept with each record in its
# transaction, so that a budget check reads one row however many calls the thread made.
TOTALS_TABLE = USAGE_TOTALS_TABLE
_SUM_COLUMNS = ("calls", "input_tokens", "output_tokens", "cached_tokens", "cost", "unpriced", "latency_ms")
_SUM_OF = (
    "count(*), sum(input_tokens), sum(output_tokens), sum(cached_tokens), coalesce(sum(cost), 0), "
    "sum(CASE WHEN cost IS NULL THEN 1 ELSE 0 END), coalesce(sum(latency_ms), 0)"
)
_SCOPE_KEYS = {  # scope: key1, key2, which rows, grouped by
    "thread": ("thread_id", "''", "thread_id IS NOT NULL", "thread_id"),
    "turn": (
        "thread_id",
        "CAST(turn AS TEXT)",
        "thread_id IS NOT NULL AND turn IS NOT NULL",
        "thread_id, turn",
    ),
    "user_day": ("user_id", "day", "user_id IS NOT NULL", "user_id, day"),
}


def _totals(real: str) -> tuple[str, ...]:
    create = (
        f"CREATE TABLE {TOTALS_TABLE} (scope TEXT NOT NULL, key1 TEXT NOT NULL, key2 TEXT NOT NULL, "
        "calls INTEGER NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, "
        f"cached_tokens INTEGER NOT NULL, cost {real} NOT NULL, unpriced INTEGER NOT NULL, "
        f"latency_ms {real} NOT NULL, PRIMARY KEY (scope, key1, key2))"
    )
    backfill = tuple(
        f"INSERT INTO {TOTALS_TABLE} (scope, key1, key2, {', '.join(_SUM_COLUMNS)}) "
        f"SELECT '{scope}', {k1}, {k2}, {_SUM_OF} FROM {USAGE_TABLE} WHERE {cond} GROUP BY {group}"
        for scope, (k1, k2, cond, group) in _SCOPE_KEYS.items()
    )
    return (create, *backfill)


TOTALS_TRIGGER = f"{TOTALS_TABLE}_add"


def _scope_rows(row: str, unpriced: str, source: str = "") -> str:
    """The running totals a new ledger row adds to, one SELECT per scope it has a key for (as
    add_to_totals keys them): ``row`` names the new row (a trigger's NEW, a CTE), ``unpriced`` says 1 when
    it has no cost, ``source`` is where the row is read from (none in a trigger)."""
    sums = (
        f"1, {row}.input_tokens, {row}.output_tokens, {row}.cached_tokens, coalesce({row}.cost, 0), "
        f"{unpriced}, coalesce({row}.latency_ms, 0)"
    )
    scopes = (  # scope, key1, key2, when
        ("thread", f"{row}.thread_id", "''", f"{row}.thread_id IS NOT NULL"),
        (
            "turn",
            f"{row}.thread_id",
            f"CAST({row}.turn AS TEXT)",
            f"{row}.thread_id IS NOT NULL AND {row}.turn IS NOT NULL",
        ),
        ("user_day", f"{row}.user_id", f"{row}.day", f"{row}.user_id IS NOT NULL"),
    )
    return " UNION ALL ".join(
        f"SELECT '{s}', {k1}, {k2}, {sums}{source} WHERE {when}" for s, k1, k2, when in scopes
    )


_ADDED = ", ".join(f"{c} = {TOTALS_TABLE}.{c} + excluded.{c}" for c in _SUM_COLUMNS)


def _totals_trigger() -> tuple[str, ...]:
    """SQLite: a trigger adds each new row to its running totals, so a record is one INSERT (one statement
    and its implicit transaction instead of BEGIN, INSERT, upsert, COMMIT). It fires only for a row that
    was inserted: a call id already there (ON CONFLICT DO NOTHING) adds nothing."""
    return (
        f"CREATE TRIGGER {TOTALS_TRIGGER} AFTER INSERT ON {USAGE_TABLE} BEGIN "
        f"INSERT INTO {TOTALS_TABLE} (scope, key1, key2, {', '.join(_SUM_COLUMNS)}) "
        f"{_scope_rows('NEW', 'NEW.cost IS NULL')} "
        f"ON CONFLICT (scope, key1, key2) DO UPDATE SET {_ADDED}; END",
    )


LEDGER = _migrate.Component(
    "usage",
    sqlite=(
        _create("INTEGER PRIMARY KEY AUTOINCREMENT", "REAL"),
        _totals("REAL"),
        _totals_trigger(),
        holds_schema("REAL"),  # v4: what calls in flight hold of the budgets (remem.usage._holds)
    ),
    # PostgreSQL writes the row and its totals in one statement already (record_postgres): v3 is empty.
    postgres=(
        _create("BIGSERIAL PRIMARY KEY", "DOUBLE PRECISION"),
        _totals("DOUBLE PRECISION"),
        (),
        holds_schema("DOUBLE PRECISION"),
    ),
)

By = Literal["turn", "thread", "model", "day", "user", "kind"]
BY: tuple[By, ...] = ("turn", "thread", "model", "day", "user", "kind")
# The column each grouping reads; a turn is only meaningful within a thread, so it groups by both.
_GROUP_COLUMNS: dict[str, tuple[str, ...]] = {
    "turn": ("thread_id", "turn"),
    "thread": ("thread_id",),
    "model": ("model",),
    "day": ("day",),
    "user": ("user_id",),
    "kind": ("kind",),
}


@dataclass(frozen=True)
class Filters:
    """Which calls: all given conditions hold (``since`` is an epoch time)."""

    thread_id: str | None = None
    user_id: str | None = None
    turn: int | None = None
    day: str | None = None
    since: float | None = None
    kind: str | None = None
    id_prefix: str | None = None  # the calls of threads or users whose ids begin with it (a server's tenant)

    def where(self, ph: str) -> tuple[str, tuple[Any, ...]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("thread_id", self.thread_id),
            ("user_id", self.user_id),
            ("turn", self.turn),
            ("day", self.day),
            ("kind", self.kind),
        ):
            if value is not None:
                clauses.append(f"{column} = {ph}")
                params.append(value)
        if self.since is not None:
            clauses.append(f"at >= {ph}")
            params.append(self.since)
        if self.id_prefix is not None:
            n = len(self.id_prefix)  # substr, not LIKE: a tenant's name may hold LIKE's "_"
            clauses.append(f"(substr(thread_id, 1, {n}) = {ph} OR substr(user_id, 1, {n}) = {ph})")
            params += [self.id_prefix, self.id_prefix]
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _ph(dialect: str) -> str:
    return "?" if dialect == "sqlite" else "%s"


# The SQL text of a record and a budget read depends only on the dialect and how many scopes: built once.
@lru_cache(maxsize=8)
def _insert_sql(dialect: str) -> str:
    ph = _ph(dialect)
    return (
        f"INSERT INTO {USAGE_TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join([ph] * len(COLUMNS))}) "
        "ON CONFLICT (call_id) DO NOTHING RETURNING id"
    )


@lru_cache(maxsize=16)
def _upsert_sql(dialect: str, rows: int) -> str:
    ph = _ph(dialect)
    row = f"({', '.join([ph] * (3 + len(_SUM_COLUMNS)))})"
    return (
        f"INSERT INTO {TOTALS_TABLE} (scope, key1, key2, {', '.join(_SUM_COLUMNS)}) "
        f"VALUES {', '.join([row] * rows)} "
        f"ON CONFLICT (scope, key1, key2) DO UPDATE SET {_ADDED}"
    )


def insert(dialect: str, event: UsageEvent) -> tuple[str, tuple[Any, ...]]:
    """The row's INSERT: it returns the new id, or nothing when a row with the same call id exists."""
    sql = _insert_sql(dialect)
    values = (
        event.kind,
        event.thread_id,
        event.user_id,
        event.turn,
        event.node,
        event.model,
        event.input_tokens,
        event.output_tokens,
        event.cached_tokens,
        event.source,
        event.latency_ms,
        event.cost,
        event.at,
        day_of(event.at),
        event.call_id,
    )
    return sql, values


@lru_cache(maxsize=1)
def _record_sqlite_sql() -> str:
    return _insert_sql("sqlite").removesuffix(" RETURNING id")


def record_sqlite(event: UsageEvent) -> tuple[str, tuple[Any, ...]]:
    """The row's INSERT on SQLite (schema v3): its trigger adds it to the running totals in the same
    statement; a row with the same call id adds nothing. The text never changes, so sqlite3's statement
    cache prepares it once per connection."""
    return _record_sqlite_sql(), insert("sqlite", event)[1]


def add_to_totals(dialect: str, event: UsageEvent) -> list[tuple[str, tuple[Any, ...]]]:
    """The upsert that adds ``event`` to its thread's, its turn's and its user's day totals (one statement
    of one row per scope; none when the event has no thread and no user)."""
    keys: list[tuple[str, str, str]] = []
    if event.thread_id is not None:
        keys.append(("thread", event.thread_id, ""))
        if event.turn is not None:
            keys.append(("turn", event.thread_id, str(event.turn)))
    if event.user_id is not None:
        keys.append(("user_day", event.user_id, day_of(event.at)))
    if not keys:
        return []
    sql = _upsert_sql(dialect, len(keys))
    sums = (
        1,
        event.input_tokens,
        event.output_tokens,
        event.cached_tokens,
        event.cost or 0.0,
        1 if event.cost is None else 0,
        event.latency_ms or 0.0,
    )
    params: list[Any] = []
    for key in keys:
        params += key
        params += sums
    return [(sql, tuple(params))]


def record_postgres(event: UsageEvent) -> tuple[str, tuple[Any, ...]]:
    """The row's INSERT and its running totals' upserts as one PostgreSQL statement (one round trip;
    atomic, and the totals move only when the row was new: they are read from the inserted row, so the
    statement's text and its 15 parameters are the same for every call, and the server plans it once)."""
    return _record_postgres_sql(), insert("postgres", event)[1]


@lru_cache(maxsize=1)
def _record_postgres_sql() -> str:
    new_row = "thread_id, user_id, turn, day, input_tokens, output_tokens, cached_tokens, cost, latency_ms"
    rows = _scope_rows("new", "CASE WHEN new.cost IS NULL THEN 1 ELSE 0 END", " FROM new")
    return (
        f"WITH new AS ({_insert_sql('postgres').removesuffix(' RETURNING id')} RETURNING {new_row}) "
        f"INSERT INTO {TOTALS_TABLE} (scope, key1, key2, {', '.join(_SUM_COLUMNS)}) {rows} "
        f"ON CONFLICT (scope, key1, key2) DO UPDATE SET {_ADDED}"
    )


def settle_postgres(event: UsageEvent, hold_id: str) -> tuple[str, tuple[Any, ...]]:
    """:func:`record_postgres` that removes the call's hold too (:func:`remem.usage._holds.settle`), as one
    statement: the row, its running totals and the hold's end commit together, in one round trip."""
    return _settle_postgres_sql(), (hold_id, *insert("postgres", event)[1])


@lru_cache(maxsize=1)
def _settle_postgres_sql() -> str:
    record = _record_postgres_sql()
    assert record.startswith("WITH new AS (")
    return f"WITH gone AS (DELETE FROM {HOLDS_TABLE} WHERE hold = %s), " + record.removeprefix("WITH ")


def select_running_totals(dialect: str, filters: Filters) -> tuple[str, tuple[Any, ...]] | None:
    """The one-row read of a thread's, a turn's or a user's day totals; None for any other filter."""
    f = filters
    if f.since is not None or f.kind is not None:
        return None
    if f.thread_id is not None and f.user_id is None and f.day is None:
        key = ("thread", f.thread_id, "") if f.turn is None else ("turn", f.thread_id, str(f.turn))
    elif f.user_id is not None and f.day is not None and f.thread_id is None and f.turn is None:
        key = ("user_day", f.user_id, f.day)
    else:
        return None
    ph = _ph(dialect)
    sql = (
        f"SELECT {', '.join(_SUM_COLUMNS)} FROM {TOTALS_TABLE} "
        f"WHERE scope = {ph} AND key1 = {ph} AND key2 = {ph}"
    )
    return sql, key


def select_events(dialect: str, filters: Filters, limit: int | None) -> tuple[str, tuple[Any, ...]]:
    where, params = filters.where(_ph(dialect))
    sql = f"SELECT {', '.join(COLUMNS)} FROM {USAGE_TABLE}{where} ORDER BY at, id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


def event_of(row: Sequence[Any]) -> UsageEvent:
    values = dict(zip(COLUMNS, row, strict=True))
    values.pop("day")
    return UsageEvent(**values)


_SUMS = (
    "count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), "
    "coalesce(sum(cached_tokens), 0), coalesce(sum(cost), 0), "
    "coalesce(sum(CASE WHEN cost IS NULL THEN 1 ELSE 0 END), 0), coalesce(sum(latency_ms), 0)"
)


def select_totals(dialect: str, filters: Filters, by: str | None) -> tuple[str, tuple[Any, ...]]:
    where, params = filters.where(_ph(dialect))
    if by is None:
        return f"SELECT {_SUMS} FROM {USAGE_TABLE}{where}", params
    if by not in _GROUP_COLUMNS:  # never reaches SQL unchecked
        raise RememUsageError(f"cannot group usage by {by!r}; use one of {', '.join(BY)}")
    columns = ", ".join(_GROUP_COLUMNS[by])
    order = f"min(at), {columns}" if by in ("turn", "thread") else columns
    return f"SELECT {columns}, {_SUMS} FROM {USAGE_TABLE}{where} GROUP BY {columns} ORDER BY {order}", params


def totals_of(row: Sequence[Any], by: str | None) -> Totals:
    width = 0 if by is None else len(_GROUP_COLUMNS[by])
    head, sums = row[:width], row[width:]
    key: Any = None if by is None else (tuple(head) if by == "turn" else head[0])
    calls, inp, out, cached, cost, unpriced, latency = sums
    return Totals(
        key, int(calls), int(inp), int(out), int(cached), float(cost), int(unpriced), float(latency)
    )


# ---------------------------------------------------------------- erasure
#
# forget_usage is a program of remem._statements, so that its caller (remem.erasure) runs it inside the
# transaction that marks the step done in its journal: the rows go and their count is recorded together, or
# neither.

UsageForgetting = Program[int]
"""What :func:`forget_usage` is: a program of :mod:`remem._statements` (statements in the ledger's dialect)."""

_CHUNK = 500  # thread ids per statement: well under SQLite's parameter limit


def _exists(dialect: str, table: str) -> Program[bool]:
    rows = yield _migrate.table_exists(cast("_migrate.Dialect", dialect), table)
    return bool(rows)


def forget_usage(
    dialect: str, *, user_id: str | None = None, thread_ids: Sequence[str] = ()
) -> UsageForgetting:
    """Delete every call of ``user_id`` and every call in ``thread_ids``; returns how many rows went.

    The running totals of those scopes (the user's days, the threads and their turns) go with them; the
    totals that other rows share with the deleted ones (another thread the user wrote in, another user's
    day in an erased thread) are summed again from the rows that stay, so they keep matching the ledger.
    A database without a ledger is left as it is (0). ``dialect`` is ``"sqlite"`` or ``"postgres"``.
    """
    if not (yield from _exists(dialect, USAGE_TABLE)):
        return 0
    # SchemaTooNewError for a ledger a newer remem wrote (which this one refuses to record into, and so must
    # not erase from either: it may not even read its rows right)
    yield from _migrate.check(LEDGER, cast("_migrate.Dialect", dialect))
    totals = yield from _exists(dialect, TOTALS_TABLE)
    ph = _ph(dialect)
    threads = sorted(set(thread_ids))
    wheres: list[tuple[str, tuple[Any, ...]]] = []
    if user_id is not None:
        wheres.append((f"user_id = {ph}", (user_id,)))
    for i in range(0, len(threads), _CHUNK):
        chunk = tuple(threads[i : i + _CHUNK])
        wheres.append((f"thread_id IN ({', '.join([ph] * len(chunk))})", chunk))
    removed = 0
    touched: set[tuple[str, str, str]] = set()
    for where, params in wheres:
        if totals:
            rows = yield Statement(
                f"SELECT DISTINCT thread_id, turn, user_id, day FROM {USAGE_TABLE} WHERE {where}", params
            )
            for thread, turn, user, day in rows:
                if thread is not None:
                    touched.add(("thread", thread, ""))
                    if turn is not None:
                        touched.add(("turn", thread, str(turn)))
                if user is not None:
                    touched.add(("user_day", user, str(day)))
        removed += int((yield from rowcount(f"DELETE FROM {USAGE_TABLE} WHERE {where}", params)))
    if not totals:
        return removed
    holds = yield from _exists(dialect, HOLDS_TABLE)  # the ids of calls in flight go too
    for table in (TOTALS_TABLE, HOLDS_TABLE) if holds else (TOTALS_TABLE,):
        if user_id is not None:
            yield from rowcount(f"DELETE FROM {table} WHERE scope = 'user_day' AND key1 = {ph}", (user_id,))
        for i in range(0, len(threads), _CHUNK):
            chunk = tuple(threads[i : i + _CHUNK])
            marks = ", ".join([ph] * len(chunk))
            yield from rowcount(
                f"DELETE FROM {table} WHERE scope IN ('thread', 'turn') AND key1 IN ({marks})", chunk
            )
    for key in sorted(touched):
        scope, owner, _ = key
        if owner == user_id if scope == "user_day" else owner in threads:
            continue  # its whole scope went above
        yield from _sum_again(dialect, key)
    return removed


def _sum_again(dialect: str, key: tuple[str, str, str]) -> Program[None]:
    """Replace the running totals of ``key`` (scope, key1, key2) by the sums of its rows (none: no row)."""
    ph = _ph(dialect)
    scope, key1, key2 = key
    first, second, cond, group = _SCOPE_KEYS[scope]
    match = {
        "thread": (f"thread_id = {ph}", (key1,)),
        "turn": (f"thread_id = {ph} AND CAST(turn AS TEXT) = {ph}", (key1, key2)),
        "user_day": (f"user_id = {ph} AND day = {ph}", (key1, key2)),
    }
    where, params = match[scope]
    yield from rowcount(f"DELETE FROM {TOTALS_TABLE} WHERE scope = {ph} AND key1 = {ph} AND key2 = {ph}", key)
    yield from rowcount(
        f"INSERT INTO {TOTALS_TABLE} (scope, key1, key2, {', '.join(_SUM_COLUMNS)}) "
        f"SELECT '{scope}', {first}, {second}, {_SUM_OF} FROM {USAGE_TABLE} "
        f"WHERE {cond} AND {where} GROUP BY {group}",
        params,
    )
