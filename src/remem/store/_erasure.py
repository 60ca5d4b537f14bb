"""Programs for erasure, TTL sweeps and statistics (see :mod:`remem.store._program` for how they run)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from remem.errors import ErasureConflictError, StorageError
from remem.layout import (
    ERASURE_JOURNAL_TABLE,
    ERASURE_REGISTRY_TABLE,
    THREAD_META_KEY,
    extraction_root,
    threads_root,
    unescape_label,
)
from remem.store import _core as core
from remem.store._exec import Program, Sql, Tx
from remem.store._program import _CHUNK, Dialect, delete_ids
from remem.store._schema import ITEMS, NS, VECTORS

if TYPE_CHECKING:
    from remem.store._base import RememStoreBase

T = TypeVar("T")
Found = dict[int, tuple[tuple[str, ...], str, str]]


@dataclass
class ForgetReport:
    """What an erasure removed. ``scopes`` says what was asked; counts are rows deleted."""

    scopes: list[str]
    items: int = 0
    vectors: int = 0
    keyword_rows: int = 0
    namespaces: int = 0
    queued: int = 0
    compacted: bool = False
    item_keys: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("scopes", ", ".join(self.scopes)),
            ("items", str(self.items)),
            ("vectors", str(self.vectors)),
            ("keyword index rows", str(self.keyword_rows)),
            ("namespaces", str(self.namespaces)),
            ("queued extraction work", str(self.queued)),
            ("storage compacted", "yes" if self.compacted else "no"),
        ]


def _select(d: Dialect, where: str, params: list[Any]) -> Program[Found]:
    rows = yield Sql(
        d.q(
            f"SELECT i.id, n.path, i.key, i.value FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id WHERE {where}"
        ),
        params,
    )
    return {int(r[0]): (core.ns_tuple(r[1]), r[2], r[3]) for r in rows}


def forget_program(
    d: Dialect,
    tx: Tx,
    prefixes: list[tuple[str, ...]],
    value_matches: list[tuple[tuple[str, ...], str, str]],
    scopes: list[str],
    owner: tuple[str, str] | None = None,
) -> Program[tuple[ForgetReport, list[str]]]:
    """Delete every item under ``prefixes`` and every item under a prefix whose value[key] == value.

    With ``owner`` = (key, value), a thread ``("threads", T)`` in which a matched item sits is deleted whole
    when every item of it that names an owner names this one (a thread shared with another user is not).
    """
    ids: Found = {}
    for prefix in prefixes:
        core.validate_namespace(prefix)
        where, params = d.ns_condition(prefix)
        ids.update((yield from _select(d, where, params)))
    for prefix, key, value in value_matches:
        core.validate_namespace(prefix, allow_empty=True)
        where, params = d.ns_condition(prefix)
        cond, extra = d.filter_condition(key, "str", value)
        ids.update((yield from _select(d, f"{where} AND {cond}", params + extra)))
    if owner is not None:
        threads = sorted({ns[:2] for ns, _, _ in ids.values() if len(ns) >= 2 and ns[:1] == threads_root()})
        for thread in threads:
            where, params = d.ns_condition(thread)
            found = yield from _select(d, where, params)
            owners = {core.loads(v).get(owner[0]) for _, _, v in found.values()} - {None}
            if owners == {owner[1]}:
                ids.update(found)
    report = ForgetReport(scopes=scopes)
    report.item_keys = sorted((ns, key) for ns, key, _ in ids.values())
    report.queued = sum(1 for ns, _, _ in ids.values() if ns[:2] == extraction_root())
    report.items, report.vectors, report.keyword_rows = yield from delete_ids(d, tx, sorted(ids))
    paths = sorted({core.ns_path(ns) for ns, _, _ in ids.values()})
    for start in range(0, len(paths), _CHUNK):
        chunk = paths[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        deleted = yield Sql(
            d.q(
                f"DELETE FROM {NS} WHERE path IN ({marks}) AND NOT EXISTS "
                f"(SELECT 1 FROM {ITEMS} i WHERE i.ns_id = {NS}.id)"
            ),
            chunk,
            "count",
        )
        report.namespaces += int(deleted[0][0])
    return report, [v for _, _, v in ids.values()]


def sweep_program(d: Dialect, tx: Tx, now: float) -> Program[int]:
    rows = yield Sql(d.q(f"SELECT id FROM {ITEMS} WHERE expires_at IS NOT NULL AND expires_at <= ?"), [now])
    counts = yield from delete_ids(d, tx, [int(r[0]) for r in rows])
    return counts[0]


def stats_program(d: Dialect) -> Program[dict[str, Any]]:
    out: dict[str, Any] = {}
    for name, sql in (
        ("items", f"SELECT count(*) FROM {ITEMS}"),
        ("namespaces", f"SELECT count(*) FROM {NS}"),
        ("vectors", f"SELECT count(*) FROM {VECTORS}"),
        ("expiring items", f"SELECT count(*) FROM {ITEMS} WHERE expires_at IS NOT NULL"),
    ):
        out[name] = int((yield Sql(d.q(sql), []))[0][0])
    rows = yield Sql(
        d.q(f"SELECT n.path, count(i.id) FROM {NS} n JOIN {ITEMS} i ON i.ns_id = n.id GROUP BY n.path"),
        [],
    )
    top: dict[str, int] = {}
    for path, count in rows:
        head = path.split(core.SEP, 1)[0]
        top[head] = top.get(head, 0) + int(count)
    out["by_root"] = dict(sorted(top.items(), key=lambda kv: -kv[1]))
    return out


# ---------------------------------------------------------------- the erasure journal
#
# ``remem.erasure`` records each erasure here before it deletes anything, in the same database as the data,
# so that a run killed or refused half way can be finished by the next one. The store keeps the rows and
# knows nothing of what a plan means. The table names live in remem.layout.

JOURNAL_TABLE = ERASURE_JOURNAL_TABLE
REGISTRY_TABLE = ERASURE_REGISTRY_TABLE

# Their tables are migration 2 of the store's schema (remem.store._schema): every store setup() creates them.
_ENTRY_COLS = "id, started_at, finished_at, state, scope_digest, plan, done, totals, revision"


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

    def row(self) -> list[Any]:
        return [
            self.id,
            self.started_at,
            self.finished_at,
            self.state,
            self.scope_digest,
            json.dumps(self.plan, sort_keys=True),
            json.dumps(self.done),
            json.dumps(self.totals, sort_keys=True),
            self.revision,
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


def journal_open_program(d: Dialect) -> Program[list[JournalEntry]]:
    rows = yield Sql(
        d.q(f"SELECT {_ENTRY_COLS} FROM {JOURNAL_TABLE} WHERE state <> 'closed' ORDER BY started_at, id"), []
    )
    return [_entry(r) for r in rows]


def journal_save_program(d: Dialect, entry: JournalEntry) -> Program[None]:
    """Write ``entry`` as its next revision; refused when another run wrote it since it was read."""
    if entry.revision == 0:
        entry.revision = 1
        marks = ", ".join("?" for _ in range(9))
        yield Sql(d.q(f"INSERT INTO {JOURNAL_TABLE} ({_ENTRY_COLS}) VALUES ({marks})"), entry.row(), "none")
        return
    read = entry.revision
    entry.revision += 1
    columns = _ENTRY_COLS.split(", ")[1:]
    changed = yield Sql(
        d.q(
            f"UPDATE {JOURNAL_TABLE} SET {', '.join(f'{c} = ?' for c in columns)} WHERE id = ? AND revision = ?"
        ),
        [*entry.row()[1:], entry.id, read],
        "count",
    )
    if int(changed[0][0]) != 1:
        entry.revision = read
        raise ErasureConflictError(
            f"another run of forget is working on erasure {entry.id}; let it finish, or run forget again"
        )


def journaled_forget_program(
    d: Dialect,
    tx: Tx,
    prefixes: list[tuple[str, ...]],
    value_matches: list[tuple[tuple[str, ...], str, str]],
    scopes: list[str],
    owner: tuple[str, str] | None,
    record: Callable[[ForgetReport], JournalEntry],
) -> Program[tuple[ForgetReport, list[str]]]:
    """:func:`forget_program`, and the journal entry ``record`` makes of its report, in one transaction:
    a step is marked done exactly when its deletions commit."""
    report, values = yield from forget_program(d, tx, prefixes, value_matches, scopes, owner)
    yield from journal_save_program(d, record(report))
    return report, values


def journaled_program(
    d: Dialect, make: Callable[[], Program[T]], record: Callable[[T], JournalEntry]
) -> Program[T]:
    """The program ``make()`` builds (a higher layer's statements, such as the usage ledger's), and the
    journal entry ``record`` makes of its result, in one transaction: the step is marked done exactly when
    its deletions commit."""
    result = yield from make()
    yield from journal_save_program(d, record(result))
    return result


def meta_threads_program(d: Dialect, user_id: str) -> Program[list[str]]:
    """Threads whose memory-client record ``("threads", T, "meta")`` names ``user_id`` as their user."""
    where, params = d.ns_condition(threads_root())
    cond, extra = d.filter_condition("user_id", "str", user_id)
    rows = yield Sql(
        d.q(
            f"SELECT n.path FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id "
            f"WHERE {where} AND {cond} AND i.key = ?"
        ),
        [*params, *extra, THREAD_META_KEY],
    )
    found = (core.ns_tuple(r[0]) for r in rows)
    return sorted({unescape_label(ns[1]) for ns in found if len(ns) == 3 and ns[2] == "meta"})


def registry_add_program(d: Dialect, kind: str, templates: Sequence[str]) -> Program[None]:
    for template in templates:
        yield Sql(
            d.q(f"DELETE FROM {REGISTRY_TABLE} WHERE kind = ? AND template = ?"), [kind, template], "none"
        )
        yield Sql(
            d.q(f"INSERT INTO {REGISTRY_TABLE} (kind, template) VALUES (?, ?)"), [kind, template], "none"
        )


def registry_program(d: Dialect) -> Program[list[tuple[str, str]]]:
    rows = yield Sql(d.q(f"SELECT kind, template FROM {REGISTRY_TABLE} ORDER BY kind, template"), [])
    return [(str(r[0]), str(r[1])) for r in rows]


# ---------------------------------------------------------------- journal and compaction, run on a store


def run_journal(store: RememStoreBase, make: Callable[..., Program[T]], *args: Any) -> T:
    """Run the journal program ``make(*args)`` in one write transaction of ``store`` (whose setup created the
    journal's tables); the store may build it again to retry after a lost connection."""
    return store._run(lambda tx: make(*args), write=True)


def check_scope(
    *, user_id: str | None = None, thread_id: str | None = None, namespace: tuple[str, ...] | None = None
) -> None:
    """Refuse an erasure scope the store would refuse, before anything is written."""
    from remem.store._base import forget_scopes

    forget_scopes(user_id, thread_id, namespace)


def journaled_forget(
    store: RememStoreBase,
    record: Callable[[ForgetReport], JournalEntry],
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    namespace: tuple[str, ...] | str | None = None,
) -> ForgetReport:
    """What ``store.forget`` deletes, without compacting, committed together with the journal entry."""
    from remem.store._base import forget_scopes

    prefixes, matches, scopes = forget_scopes(user_id, thread_id, namespace)
    owner = ("user_id", user_id) if user_id is not None else None
    result = store._run(
        lambda tx: journaled_forget_program(store.dialect, tx, prefixes, matches, scopes, owner, record),
        write=True,
    )
    store._evict_texts(result[1])
    return result[0]


@dataclass
class Compaction:
    """The outcome of :func:`compact`: ``done`` only when it was checked; ``detail`` says what happened."""

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
    import psycopg

    conn: psycopg.Connection[Any] = store.conn
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
