"""One migration runner for every schema remem keeps in a database (checkpoints, store, ledger...).

A schema is a :class:`Component`: a name and, per dialect, an ordered list of migrations (migration ``n``
is the ``n``-th entry, numbered from 1), each a tuple of SQL statements. One table records what every
component has applied::

    remem_schema(component TEXT, version INTEGER, applied_at REAL, PRIMARY KEY (component, version))

The planner does no I/O. :func:`upgrade` and :func:`check` are programs of :mod:`remem._statements` (they
yield statements and receive each one's rows back); a driver runs them inside ONE write transaction, so
each migration is committed together with its record, or not at all:

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

A saver or store runs ``yield from _migrate.upgrade(STORE, dialect)`` inside a program of its own (in a
transaction it opened as a writer); ``_statements.drive(_migrate.check(STORE, "sqlite"), execute)`` runs a
plan with any executor.

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

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from remem._statements import Program, Statement, drive, execute, run_immediate
from remem.errors import SchemaTooNewError

__all__ = [
    "LOCK_KEY",
    "TABLE",
    "Component",
    "Legacy",
    "check",
    "run_postgres",
    "run_sqlite",
    "table_exists",
    "upgrade",
]

TABLE = "remem_schema"
LOCK_KEY = 0x72656D656D  # pg_advisory_xact_lock key shared by every remem setup()

Dialect = Literal["sqlite", "postgres"]


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
        return Statement("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    return Statement("SELECT 1 WHERE to_regclass(%s) IS NOT NULL", (table,))


def _recorded(component: Component, dialect: Dialect) -> Program[set[int]]:
    """The versions recorded for ``component`` (in remem_schema, else in its legacy table)."""
    done: set[int] = set()
    if (yield table_exists(dialect, TABLE)):
        rows = yield Statement(
            _ph(dialect, f"SELECT version FROM {TABLE} WHERE component = ?"), (component.name,)
        )
        done = {int(r[0]) for r in rows}
    if not done and component.legacy is not None and (yield table_exists(dialect, component.legacy.table)):
        legacy = component.legacy
        rows = yield Statement(f"SELECT {legacy.column} FROM {legacy.table}")
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


def check(component: Component, dialect: Dialect) -> Program[int]:
    """Read-only: the version ``component`` is at (0: none); refuses a schema newer than this remem's."""
    done = yield from _recorded(component, dialect)
    _refuse_newer(component, done)
    return max(done, default=0)


def upgrade(component: Component, dialect: Dialect, *, now: Callable[[], float] = time.time) -> Program[int]:
    """Apply ``component``'s pending migrations, each with its record; returns the version reached.

    Run it in one write transaction (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: any, it locks itself).
    """
    if dialect == "postgres":
        yield Statement("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    yield Statement(
        f"CREATE TABLE IF NOT EXISTS {TABLE} (component TEXT NOT NULL, version INTEGER NOT NULL, "
        f"applied_at {real} NOT NULL, PRIMARY KEY (component, version))",
        fetch="none",
    )
    done = yield from _recorded(component, dialect)
    _refuse_newer(component, done)
    record = _ph(dialect, f"INSERT INTO {TABLE} (component, version, applied_at) VALUES (?, ?, ?)")
    # Carry a legacy table's versions over once, so the next setup() reads remem_schema only.
    carried = yield Statement(
        _ph(dialect, f"SELECT count(*) FROM {TABLE} WHERE component = ?"), (component.name,)
    )
    if done and not carried[0][0]:
        for version in sorted(done):
            yield Statement(record, (component.name, version, now()), "none")
    for version, statements in enumerate(component.migrations(dialect), start=1):
        if version in done:
            continue
        for text in statements:
            yield Statement(text, fetch="none")
        yield Statement(record, (component.name, version, now()), "none")
    return component.latest


def run_sqlite(conn: Any, component: Component) -> int:
    """:func:`upgrade` on a ``sqlite3`` connection in autocommit mode, in one ``BEGIN IMMEDIATE`` transaction."""

    return run_immediate(conn, upgrade(component, "sqlite"))


def run_postgres(conn: Any, component: Component) -> int:
    """:func:`upgrade` on a ``psycopg`` connection, in one transaction (whatever its row factory)."""
    from psycopg.rows import tuple_row

    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        return drive(upgrade(component, "postgres"), functools.partial(execute, cur))
