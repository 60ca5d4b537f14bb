"""The erasure journal and the registry of where apps keep per-user data, as statements.

:mod:`remem.erasure` records each erasure here before it deletes anything, in the same database as the data,
so that a run killed or refused half way can be finished by the next one. The statements are
:data:`remem.store.Statements`, programs of :mod:`remem._statements` (as the usage ledger's and the job
queue's forgetting are): the store runs them in its own transaction, the journal's write together with the deletions it records. The
table names live in :mod:`remem.layout`; the tables are this package's schema component (:data:`SCHEMA`),
set up by :func:`setup` whenever an erasure opens a database. Before it had a component of its own, the
store's migration 2 created them (with ``IF NOT EXISTS``, as here): such databases keep them as they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from remem import _migrate
from remem._statements import Statement, rowcount
from remem.errors import ErasureConflictError
from remem.layout import ERASURE_JOURNAL_TABLE, ERASURE_REGISTRY_TABLE
from remem.store import Statements

__all__ = ["SCHEMA", "JournalEntry", "add_templates", "open_entries", "save", "setup", "templates"]

_TABLES = (  # the same text in both dialects
    f"CREATE TABLE IF NOT EXISTS {ERASURE_JOURNAL_TABLE} (id TEXT PRIMARY KEY, started_at TEXT NOT NULL, "
    "finished_at TEXT, state TEXT NOT NULL, scope_digest TEXT, plan TEXT NOT NULL, done TEXT NOT NULL, "
    "totals TEXT NOT NULL, revision INTEGER NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {ERASURE_REGISTRY_TABLE} (kind TEXT NOT NULL, template TEXT NOT NULL, "
    "PRIMARY KEY (kind, template))",
)
SCHEMA = _migrate.Component("erasure", sqlite=(_TABLES,), postgres=(_TABLES,))
"""The journal's and the registry's tables, in the database of the data they are about."""

_COLS = "id, started_at, finished_at, state, scope_digest, plan, done, totals, revision"


def _q(backend: str, sql: str) -> str:
    """``?`` placeholders in ``backend``'s spelling."""
    return sql if backend == "sqlite" else sql.replace("?", "%s")


@dataclass
class JournalEntry:
    """One erasure as recorded: ``state`` is ``open`` (deleting), ``compacting`` or ``closed``.

    ``plan`` is what it covers, ``done`` the steps finished, ``totals`` what they removed so far.
    """

    id: str
    started_at: str
    state: str
    scope_digest: str | None
    plan: dict[str, Any]
    done: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    finished_at: str | None = None
    revision: int = 0  # how many times it was written; a write expects the revision it read

    def row(self, revision: int) -> list[Any]:
        return [
            self.id,
            self.started_at,
            self.finished_at,
            self.state,
            self.scope_digest,
            json.dumps(self.plan, sort_keys=True),
            json.dumps(self.done),
            json.dumps(self.totals, sort_keys=True),
            revision,
        ]


def _entry(row: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        id=row[0],
        started_at=row[1],
        finished_at=row[2],
        state=row[3],
        scope_digest=row[4],
        plan=json.loads(row[5]),
        done=list(json.loads(row[6])),
        totals=dict(json.loads(row[7])),
        revision=int(row[8]),
    )


def setup(backend: str) -> Statements[int]:
    """Create or migrate the journal's tables (idempotent; :data:`SCHEMA`); its version."""
    return (yield from _migrate.upgrade(SCHEMA, "postgres" if backend == "postgres" else "sqlite"))


def open_entries(backend: str) -> Statements[list[JournalEntry]]:
    """The erasures not closed, oldest first."""
    rows = yield Statement(
        f"SELECT {_COLS} FROM {ERASURE_JOURNAL_TABLE} WHERE state <> 'closed' ORDER BY started_at, id", ()
    )
    return [_entry(r) for r in rows]


def save(backend: str, entry: JournalEntry) -> Statements[int]:
    """Write ``entry`` as its next revision, which it returns (set it on the entry once the transaction has
    committed); refused when another run wrote the entry since it was read."""
    read = entry.revision
    if read == 0:
        marks = ", ".join("?" for _ in range(9))
        sql = f"INSERT INTO {ERASURE_JOURNAL_TABLE} ({_COLS}) VALUES ({marks})"
        yield from rowcount(_q(backend, sql), entry.row(1))
        return 1
    columns = _COLS.split(", ")[1:]
    sets = ", ".join(f"{c} = ?" for c in columns)
    changed = yield from rowcount(
        _q(backend, f"UPDATE {ERASURE_JOURNAL_TABLE} SET {sets} WHERE id = ? AND revision = ?"),
        [*entry.row(read + 1)[1:], entry.id, read],
    )
    if int(changed) != 1:
        raise ErasureConflictError(
            f"another run of forget is working on erasure {entry.id}; let it finish, or run forget again"
        )
    return read + 1


def add_templates(backend: str, kind: str, given: Sequence[str]) -> Statements[None]:
    """Register ``given`` templates of ``kind`` (``namespace`` or ``thread``); registering is idempotent."""
    for template in given:
        yield from rowcount(
            _q(backend, f"DELETE FROM {ERASURE_REGISTRY_TABLE} WHERE kind = ? AND template = ?"),
            [kind, template],
        )
        yield from rowcount(
            _q(backend, f"INSERT INTO {ERASURE_REGISTRY_TABLE} (kind, template) VALUES (?, ?)"),
            [kind, template],
        )


def templates(backend: str) -> Statements[list[tuple[str, str]]]:
    """Every registered (kind, template)."""
    rows = yield Statement(f"SELECT kind, template FROM {ERASURE_REGISTRY_TABLE} ORDER BY kind, template", ())
    return [(str(r[0]), str(r[1])) for r in rows]
