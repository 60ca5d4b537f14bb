"""One migration runner for every schema remem keeps in a database (checkpoints, store, ledger...).

A schema is a :class:`Component`: a name and, per dialect, an ordered list of migrations (migration ``n``
is the ``n``-th entry, numbered from 1), each a tuple of SQL statements. One table records what every
component has applied::

    remem_schema(component TEXT, version INTEGER, applied_at REAL, PRIMARY KEY (component, version))

The planner does no I/O. :func:`upgrade` and :func:`check` are generators that yield :class:`Statement`
objects (SQL already in the dialect's placeholder style) and receive each one's rows back; a driver runs
them inside ONE write transaction, so each migration is committed together with its record, or not at all:

    from remem import _migrate

    STORE = _migrate.Component(
        "store",
        sqlite=(("CREATE TABLE ...", "CREATE INDEX ..."), ("ALTER TABLE ...",)),   # v1, v2
        postgres=(("CREATE TABLE ...", "CREATE INDEX ..."), ("ALTER TABLE ...",)),
        legacy=_migrate.Legacy("remem_store_migrations", "v", offset=1),        # its old 0-based table
    )

    def setup(self):                                  # sqlite3 connection in autocommit mode
        _migrate.run_sqlite(self.conn, STORE)         # BEGIN IMMEDIATE ... COMMIT
    def setup(self):                                  # psycopg connection
        _migrate.run_postgres(self.conn, STORE)       # one transaction, advisory lock first

A driver with its own executor calls ``_migrate.drive(_migrate.upgrade(STORE, "sqlite"), execute)`` (or
``adrive`` with an async ``execute``) inside a transaction it opened as a writer.

Guarantees:
- Idempotent: applied migrations are skipped; a current schema costs two reads.
- Many processes at once: on SQLite the caller's ``BEGIN IMMEDIATE`` serialises them (the busy timeout
  applies); on PostgreSQL :func:`upgrade` takes ``pg_advisory_xact_lock`` first, shared by all components.
- A schema recorded above the component's last migration was written by a newer remem: :func:`upgrade`
  and :func:`check` raise :class:`~remem.errors.SchemaTooNewError` ("upgrade remem") before touching it.
- ``legacy``: a component's own version table from before this runner is read once and carried over.
- :func:`check` only reads (for read-only opening): it returns the version found, 0 when there is none.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from remem.errors import SchemaTooNewError

__all__ = [
    "LOCK_KEY",
    "TABLE",
    "Component",
    "Legacy",
    "Plan",
    "Statement",
    "adrive",
    "check",
    "drive",
    "run_postgres",
    "run_sqlite",
    "table_exists",
    "upgrade",
]

TABLE = "remem_schema"
LOCK_KEY = 0x72656D656D  # pg_advisory_xact_lock key shared by every remem setup()

Dialect = Literal["sqlite", "postgres"]
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Statement:
    """One statement in the dialect's placeholder style; ``rows``: whether it returns rows to send back."""

    sql: str
    params: tuple[Any, ...] = ()
    rows: bool = False


Plan = Generator[Statement, Rows, int]
"""What :func:`upgrade` and :func:`check` are: send each statement's rows back; the return value is a version."""


@dataclass(frozen=True)
class Legacy:
    """A component's version table from before this runner: ``version + offset`` is the version here."""

    table: str
    column: str
    offset: int = 0


@dataclass(frozen=True)
class Component:
    """A schema: its name and its migrations per dialect, in order (the first is version 1)."""

    name: str
    sqlite: Sequence[Sequence[str]]
    postgres: Sequence[Sequence[str]]
    legacy: Legacy | None = None

    def migrations(self, dialect: Dialect) -> Sequence[Sequence[str]]:
        return self.sqlite if dialect == "sqlite" else self.postgres

    @property
    def latest(self) -> int:
        if len(self.sqlite) != len(self.postgres):  # pragma: no cover - a programming error
            raise AssertionError(f"{self.name}: the dialects have different numbers of migrations")
        return len(self.sqlite)


def _ph(dialect: Dialect, text: str) -> str:
    return text if dialect == "sqlite" else text.replace("?", "%s")


def table_exists(dialect: Dialect, table: str) -> Statement:
    """A statement that returns one row when ``table`` exists (visible on the search path), none otherwise."""
    if dialect == "sqlite":
        return Statement("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,), True)
    return Statement("SELECT 1 WHERE to_regclass(%s) IS NOT NULL", (table,), True)


def _recorded(component: Component, dialect: Dialect) -> Generator[Statement, Rows, set[int]]:
    """The versions recorded for ``component`` (in remem_schema, else in its legacy table)."""
    done: set[int] = set()
    if (yield table_exists(dialect, TABLE)):
        rows = yield Statement(
            _ph(dialect, f"SELECT version FROM {TABLE} WHERE component = ?"), (component.name,), True
        )
        done = {int(r[0]) for r in rows}
    if not done and component.legacy is not None and (yield table_exists(dialect, component.legacy.table)):
        legacy = component.legacy
        rows = yield Statement(f"SELECT {legacy.column} FROM {legacy.table}", (), True)
        done = {int(r[0]) + legacy.offset for r in rows}
    return done


def _refuse_newer(component: Component, done: set[int]) -> None:
    newest = max(done, default=0)
    if newest > component.latest:
        raise SchemaTooNewError(
            f"this database's {component.name} schema is at version {newest}, but this remem knows versions "
            f"up to {component.latest} only, so a newer remem wrote it; upgrade remem (pip install -U remem) "
            "to use this database"
        )


def check(component: Component, dialect: Dialect) -> Plan:
    """Read-only: the version ``component`` is at (0: none); refuses a schema newer than this remem's."""
    done = yield from _recorded(component, dialect)
    _refuse_newer(component, done)
    return max(done, default=0)


def upgrade(component: Component, dialect: Dialect, *, now: Callable[[], float] = time.time) -> Plan:
    """Apply ``component``'s pending migrations, each with its record; returns the version reached.

    Run it in one write transaction (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: any, it locks itself).
    """
    if dialect == "postgres":
        yield Statement("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,), True)
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    yield Statement(
        f"CREATE TABLE IF NOT EXISTS {TABLE} (component TEXT NOT NULL, version INTEGER NOT NULL, "
        f"applied_at {real} NOT NULL, PRIMARY KEY (component, version))"
    )
    done = yield from _recorded(component, dialect)
    _refuse_newer(component, done)
    record = _ph(dialect, f"INSERT INTO {TABLE} (component, version, applied_at) VALUES (?, ?, ?)")
    # Carry a legacy table's versions over once, so the next setup() reads remem_schema only.
    carried = yield Statement(
        _ph(dialect, f"SELECT count(*) FROM {TABLE} WHERE component = ?"), (component.name,), True
    )
    if done and not carried[0][0]:
        for version in sorted(done):
            yield Statement(record, (component.name, version, now()))
    for version, statements in enumerate(component.migrations(dialect), start=1):
        if version in done:
            continue
        for text in statements:
            yield Statement(text)
        yield Statement(record, (component.name, version, now()))
    return component.latest


def drive(plan: Plan, execute: Callable[[Statement], Rows]) -> int:
    """Run ``plan`` with ``execute`` (which returns the statement's rows, or ``[]``)."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(execute(statement))
    except StopIteration as finished:
        return int(finished.value)


async def adrive(plan: Plan, execute: Callable[[Statement], Awaitable[Rows]]) -> int:
    """Async version of :func:`drive`."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(await execute(statement))
    except StopIteration as finished:
        return int(finished.value)


def run_sqlite(conn: Any, component: Component) -> int:
    """:func:`upgrade` on a ``sqlite3`` connection in autocommit mode, in one ``BEGIN IMMEDIATE`` transaction."""

    def execute(statement: Statement) -> Rows:
        cur = conn.execute(statement.sql, statement.params)
        return list(cur.fetchall()) if statement.rows else []

    conn.execute("BEGIN IMMEDIATE")
    try:
        version = drive(upgrade(component, "sqlite"), execute)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return version


def run_postgres(conn: Any, component: Component) -> int:
    """:func:`upgrade` on a ``psycopg`` connection, in one transaction (whatever its row factory)."""
    from psycopg.rows import tuple_row

    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:

        def execute(statement: Statement) -> Rows:
            cur.execute(statement.sql, statement.params)
            return list(cur.fetchall()) if statement.rows else []

        return drive(upgrade(component, "postgres"), execute)
