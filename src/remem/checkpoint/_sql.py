"""SQL text for remem's checkpointers, for SQLite and PostgreSQL. No I/O here.

Statements are written once with ``?`` placeholders; :class:`Dialect` turns them into each driver's
form. Values are always bound parameters; the only names spliced into SQL are the fixed ones below.

Tables (every one keyed by ``tid``, a thread's integer id, so a thread's rows sit together):

    remem_cp_threads      thread_id -> tid, counters for item and list numbers, last activity
    remem_cp_items        each distinct value of a thread once (content digest, serialized bytes)
    remem_cp_lists        list values as snapshots or deltas of item numbers
    remem_cp_checkpoints  one row per checkpoint: parent, run, compact body (descriptors), metadata
    remem_cp_writes       pending writes, each value a descriptor

Channel, node and task-path names are items too (a checkpoint's body and a write refer to them by number).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remem import _migrate
from remem._lease import _fence
from remem.checkpoint import _ids
from remem.layout import CHECKPOINT_MIGRATIONS_TABLE, CHECKPOINT_TABLES, THREAD_FENCES_TABLE

__all__ = ["POSTGRES", "SCHEMA", "SQLITE", "Dialect"]

# v2: an insertion order per thread and namespace (``seq``), which "latest" and the head check read:
# a checkpoint id carries its writer's clock, so a process whose clock is ahead would stay "latest"
# (and lock other writers out) until the others' clocks caught up, and one behind would never be.
# Existing rows are numbered in their id order, the order they were read in until now.
_SEQ_BACKFILL = """UPDATE remem_cp_checkpoints SET seq = r.n FROM (
    SELECT tid, ns, checkpoint_id, row_number() OVER (ORDER BY tid, ns, checkpoint_id) AS n
    FROM remem_cp_checkpoints) AS r
WHERE r.tid = remem_cp_checkpoints.tid AND r.ns = remem_cp_checkpoints.ns
    AND r.checkpoint_id = remem_cp_checkpoints.checkpoint_id"""
_SEQ_INDEX = "CREATE INDEX remem_cp_checkpoints_seq ON remem_cp_checkpoints (tid, ns, seq)"
# v3: a write finds the items it shares with the thread by their digests, instead of a fresh process
# loading every digest of the thread first (100,000 rows on a 100,000-message thread). Not unique: the
# allocator keeps digests distinct, but a database written before is not checked for it.
_DIGEST_INDEX = "CREATE INDEX remem_cp_items_digest ON remem_cp_items (tid, digest)"
# v4: the thread leases' fencing tokens (remem._lease._fence), which a write under a lease reads (or, for
# a bare run's checkpoint, moves on) in its own transaction: a lease lost before its write commits and
# taken by another writer then writes nothing. Its own component creates it too where a lease is taken.
FENCE_TABLE = _fence.CREATE
# v5: values and metadata written compressed with zstd and remem's dictionary (_codec, _zdict), which an
# older remem cannot read; the tables are as they were, and what v4 wrote (zlib) is read as before.
# v6: a value that repeats most of an earlier one of its thread (a user's message once LangGraph gave it an
# id) is written compressed after it (_codec.patch_base), which an older remem cannot read; tables as before.
# v7: a long list row (a snapshot of a long thread's messages) written compressed (_codec.encode_list_row),
# which an older remem cannot read; tables as before.
# v8: checkpoint, parent and task ids stored in their short form (_ids: a uuid in 22 characters, not 36),
# the ones stored before turned into it in SQL.
# v9: a list that grew by a few items since its stored row is described by that row and the items appended
# (_codec.TAIL_MAX), not a new row, which an older remem would read without them; tables as before.
# v10: checkpoint metadata in its usual shape stored as a short array, and a checkpoint's ts as an offset
# from the moment in its uuid6 id (_codec.encode_metadata, _encode_ts), which an older remem cannot read.
# PostgreSQL's digest index keys the digest's first 8 bytes as a bigint (_DIGEST_PREFIX), not the whole
# 16-byte bytea: its entries are 28 bytes, not 44 (a lookup checks the whole digest on the row it finds).
# (a digest shorter than 8 bytes, which remem never writes, is padded with zeros as digests_param pads it)
_DIGEST_PREFIX = "(('x' || encode(substring(digest || '\\x0000000000000000'::bytea from 1 for 8), 'hex'))::bit(64)::bigint)"
_PG_DIGEST_INDEX = (
    "DROP INDEX IF EXISTS remem_cp_items_digest",
    f"CREATE INDEX remem_cp_items_digest ON remem_cp_items (tid, {_DIGEST_PREFIX})",
)

_SQLITE_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE remem_cp_threads (
            tid INTEGER PRIMARY KEY AUTOINCREMENT,
            thread_id TEXT NOT NULL UNIQUE,
            epoch INTEGER NOT NULL DEFAULT 0,
            next_item INTEGER NOT NULL DEFAULT 0,
            next_list INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL)""",
        """CREATE TABLE remem_cp_items (
            tid INTEGER NOT NULL, item_no INTEGER NOT NULL, digest BLOB NOT NULL, data BLOB NOT NULL,
            PRIMARY KEY (tid, item_no)) WITHOUT ROWID""",
        """CREATE TABLE remem_cp_lists (
            tid INTEGER NOT NULL, list_no INTEGER NOT NULL, base_no INTEGER, body BLOB NOT NULL,
            PRIMARY KEY (tid, list_no)) WITHOUT ROWID""",
        """CREATE TABLE remem_cp_checkpoints (
            tid INTEGER NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT,
            run_id TEXT, body BLOB NOT NULL, metadata BLOB NOT NULL,
            PRIMARY KEY (tid, ns, checkpoint_id)) WITHOUT ROWID""",
        "CREATE INDEX remem_cp_checkpoints_run ON remem_cp_checkpoints (run_id) WHERE run_id IS NOT NULL",
        """CREATE TABLE remem_cp_writes (
            tid INTEGER NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL,
            idx INTEGER NOT NULL, channel INTEGER NOT NULL, task_path INTEGER NOT NULL, value BLOB NOT NULL,
            PRIMARY KEY (tid, ns, checkpoint_id, task_id, idx)) WITHOUT ROWID""",
    ),
    ("ALTER TABLE remem_cp_checkpoints ADD COLUMN seq INTEGER", _SEQ_BACKFILL, _SEQ_INDEX),
    (_DIGEST_INDEX,),
    (FENCE_TABLE["sqlite"],),
    (),
    (),
    (),
    _ids.migration("sqlite"),
    (),
    (),
)

_POSTGRES_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE remem_cp_threads (
            tid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            thread_id TEXT COLLATE "C" NOT NULL UNIQUE,
            epoch BIGINT NOT NULL DEFAULT 0,
            next_item BIGINT NOT NULL DEFAULT 0,
            next_list BIGINT NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL) WITH (fillfactor = 20)""",
        # Every write updates its thread's row (counters, last activity): room on each page lets those
        # updates stay in place (HOT) instead of leaving a trail of dead rows.
        """CREATE TABLE remem_cp_items (
            tid BIGINT NOT NULL, item_no BIGINT NOT NULL, digest BYTEA NOT NULL, data BYTEA NOT NULL,
            PRIMARY KEY (tid, item_no))""",
        """CREATE TABLE remem_cp_lists (
            tid BIGINT NOT NULL, list_no BIGINT NOT NULL, base_no BIGINT, body BYTEA NOT NULL,
            PRIMARY KEY (tid, list_no))""",
        """CREATE TABLE remem_cp_checkpoints (
            tid BIGINT NOT NULL, ns TEXT COLLATE "C" NOT NULL, checkpoint_id TEXT COLLATE "C" NOT NULL,
            parent_id TEXT COLLATE "C", run_id TEXT, body BYTEA NOT NULL, metadata BYTEA NOT NULL,
            PRIMARY KEY (tid, ns, checkpoint_id))""",
        "CREATE INDEX remem_cp_checkpoints_run ON remem_cp_checkpoints (run_id) WHERE run_id IS NOT NULL",
        """CREATE TABLE remem_cp_writes (
            tid BIGINT NOT NULL, ns TEXT COLLATE "C" NOT NULL, checkpoint_id TEXT COLLATE "C" NOT NULL,
            task_id TEXT COLLATE "C" NOT NULL, idx INTEGER NOT NULL, channel BIGINT NOT NULL,
            task_path BIGINT NOT NULL, value BYTEA NOT NULL,
            PRIMARY KEY (tid, ns, checkpoint_id, task_id, idx))""",
    ),
    (
        "ALTER TABLE remem_cp_checkpoints ADD COLUMN seq BIGINT",
        _SEQ_BACKFILL,
        "ALTER TABLE remem_cp_checkpoints ALTER COLUMN seq SET NOT NULL",
        _SEQ_INDEX,
    ),
    (_DIGEST_INDEX,),
    (FENCE_TABLE["postgres"],),
    (),
    (),
    (),
    _ids.migration("postgres"),
    (),
    _PG_DIGEST_INDEX,
)

_THREADS, _ITEMS, _LISTS, _CHECKPOINTS, _WRITES = CHECKPOINT_TABLES  # the names live in remem.layout
TABLES = (_WRITES, _CHECKPOINTS, _LISTS, _ITEMS)
"""The per-thread tables, children first."""

SCHEMA = _migrate.Component(
    "checkpoint",
    sqlite=_SQLITE_MIGRATIONS,
    postgres=_POSTGRES_MIGRATIONS,
    # remem 0.1 recorded its versions here (1-based, as now)
    legacy=_migrate.Legacy(CHECKPOINT_MIGRATIONS_TABLE, "version"),
)
"""The checkpoint tables, as the one migration runner (:mod:`remem._migrate`) applies them."""

STOCK_TABLES = ("checkpoints", "checkpoint_writes")
"""The tables of LangGraph's stock SqliteSaver / PostgresSaver."""

UPSERT_THREAD = """INSERT INTO remem_cp_threads (thread_id, created_at, updated_at) VALUES (?, ?, ?)
ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at
RETURNING tid, epoch, next_item, next_list"""
FIND_THREAD = "SELECT tid, epoch, next_item, next_list, updated_at FROM remem_cp_threads WHERE thread_id = ?"
SET_COUNTERS = "UPDATE remem_cp_threads SET next_item = ?, next_list = ? WHERE tid = ?"
BUMP_EPOCH = "UPDATE remem_cp_threads SET epoch = epoch + 1 WHERE tid = ?"
DELETE_THREAD_ROW = "DELETE FROM remem_cp_threads WHERE tid = ?"
LIST_THREADS = """SELECT t.thread_id FROM remem_cp_threads t
WHERE EXISTS (SELECT 1 FROM remem_cp_checkpoints c WHERE c.tid = t.tid)
ORDER BY t.updated_at DESC, t.tid DESC"""
INSERT_THREAD_COPY = """INSERT INTO remem_cp_threads (thread_id, epoch, next_item, next_list, created_at, updated_at)
VALUES (?, 0, ?, ?, ?, ?) RETURNING tid"""

# A PostgreSQL write that trusts its saver's cache (the thread's counters, epoch and head as its last
# write left them) sends all its statements in one round trip, guarded by this one first: it takes the
# thread's row lock as UPSERT_THREAD does and fails (a division by zero, which nothing else a write sends
# can raise) when the row moved on, so the transaction writes nothing and runs again the usual way.
GUARD_THREAD = """WITH u AS (UPDATE remem_cp_threads SET next_item = ?, next_list = ?, updated_at = ?
    WHERE tid = ? AND epoch = ? AND next_item = ? AND next_list = ? AND {cond} RETURNING 1)
SELECT 1 / count(*) FROM u"""
GUARD_HEAD = (
    "(SELECT checkpoint_id FROM remem_cp_checkpoints WHERE tid = ? AND ns = ? ORDER BY seq DESC LIMIT 1) = ?"
)
GUARD_STORED = "EXISTS (SELECT 1 FROM remem_cp_checkpoints WHERE tid = ? AND ns = ? AND checkpoint_id = ?)"
GUARD_FENCE = f"SELECT 1 / count(*) FROM (SELECT 1 FROM {THREAD_FENCES_TABLE} WHERE lease_key = ? AND fence = ? FOR SHARE) f"

ITEM_DIGESTS_FROM = "SELECT item_no, digest FROM remem_cp_items WHERE tid = ? AND item_no >= ?"
DIGESTS_RUN = 256
"""Digests looked up per statement (:meth:`Dialect.items_with_digests`)."""
INSERT_ITEM = "INSERT INTO remem_cp_items (tid, item_no, digest, data) VALUES (?, ?, ?, ?)"
INSERT_LIST = "INSERT INTO remem_cp_lists (tid, list_no, base_no, body) VALUES (?, ?, ?, ?)"
SELECT_ALL_LISTS = "SELECT list_no, base_no, body FROM remem_cp_lists WHERE tid = ?"
SELECT_ITEM_NOS = "SELECT item_no FROM remem_cp_items WHERE tid = ?"

# seq: the next of the thread's namespace (the write holds the thread's row, so no other write of the
# thread comes between the read and the insert); a checkpoint written again keeps its place.
INSERT_CHECKPOINT = """INSERT INTO remem_cp_checkpoints (tid, ns, checkpoint_id, parent_id, run_id, body, metadata, seq)
VALUES (?, ?, ?, ?, ?, ?, ?,
    (SELECT coalesce(max(seq), 0) + 1 FROM remem_cp_checkpoints WHERE tid = ? AND ns = ?))
ON CONFLICT (tid, ns, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
    run_id = excluded.run_id, body = excluded.body, metadata = excluded.metadata"""
HEAD_ID = "SELECT checkpoint_id FROM remem_cp_checkpoints WHERE tid = ? AND ns = ? ORDER BY seq DESC LIMIT 1"
HEAD_STAMP = """SELECT c.checkpoint_id, t.epoch, (SELECT COUNT(*) FROM remem_cp_writes w
    WHERE w.tid = c.tid AND w.ns = c.ns AND w.checkpoint_id = c.checkpoint_id)
FROM remem_cp_checkpoints c JOIN remem_cp_threads t ON t.tid = c.tid WHERE t.thread_id = ? AND c.ns = ?
ORDER BY c.seq DESC LIMIT 1"""
CHECKPOINT_EXISTS = "SELECT 1 FROM remem_cp_checkpoints WHERE tid = ? AND ns = ? AND checkpoint_id = ?"
SELECT_BODY = "SELECT body FROM remem_cp_checkpoints WHERE tid = ? AND ns = ? AND checkpoint_id = ?"
_CHECKPOINT_COLUMNS = "t.thread_id, c.tid, c.ns, c.checkpoint_id, c.parent_id, c.body, c.metadata, t.epoch"
GET_CHECKPOINT = f"""SELECT {_CHECKPOINT_COLUMNS} FROM remem_cp_checkpoints c
JOIN remem_cp_threads t ON t.tid = c.tid WHERE t.thread_id = ? AND c.ns = ? AND c.checkpoint_id = ?"""
GET_LATEST_CHECKPOINT = f"""SELECT {_CHECKPOINT_COLUMNS} FROM remem_cp_checkpoints c
JOIN remem_cp_threads t ON t.tid = c.tid WHERE t.thread_id = ? AND c.ns = ?
ORDER BY c.seq DESC LIMIT 1"""
# PostgreSQL: the checkpoint a read wants and its pending writes in one statement, the writes as arrays of
# their columns (one round trip where two were; SQLite runs both statements, in process).
_HEAD_WITH_WRITES = f"""WITH c AS (SELECT {_CHECKPOINT_COLUMNS} FROM remem_cp_checkpoints c
    JOIN remem_cp_threads t ON t.tid = c.tid WHERE t.thread_id = ? AND c.ns = ? {{cond}})
SELECT c.*, w.* FROM c CROSS JOIN LATERAL (SELECT array_agg(checkpoint_id), array_agg(task_id), array_agg(idx),
    array_agg(channel), array_agg(task_path), array_agg(value) FROM remem_cp_writes w
    WHERE w.tid = c.tid AND w.ns = c.ns AND w.checkpoint_id = c.checkpoint_id) w"""
GET_CHECKPOINT_WITH_WRITES = _HEAD_WITH_WRITES.format(cond="AND c.checkpoint_id = ?")
GET_LATEST_WITH_WRITES = _HEAD_WITH_WRITES.format(cond="ORDER BY c.seq DESC LIMIT 1")
SELECT_THREAD_CHECKPOINTS = (
    "SELECT ns, checkpoint_id, parent_id, run_id, body, seq FROM remem_cp_checkpoints WHERE tid = ?"
)
CLEAR_PARENT = (
    "UPDATE remem_cp_checkpoints SET parent_id = NULL WHERE tid = ? AND ns = ? AND checkpoint_id = ?"
)
DELETE_CHECKPOINT = "DELETE FROM remem_cp_checkpoints WHERE tid = ? AND ns = ? AND checkpoint_id = ?"
DELETE_CHECKPOINT_WRITES = "DELETE FROM remem_cp_writes WHERE tid = ? AND ns = ? AND checkpoint_id = ?"

INSERT_WRITE = """INSERT INTO remem_cp_writes (tid, ns, checkpoint_id, task_id, idx, channel, task_path, value)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tid, ns, checkpoint_id, task_id, idx) DO NOTHING"""
UPSERT_WRITE = """INSERT INTO remem_cp_writes (tid, ns, checkpoint_id, task_id, idx, channel, task_path, value)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tid, ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = excluded.channel, task_path = excluded.task_path, value = excluded.value"""
SELECT_THREAD_WRITES = "SELECT channel, task_path, value FROM remem_cp_writes WHERE tid = ?"

COPY_STATEMENTS = (
    "INSERT INTO remem_cp_items (tid, item_no, digest, data) SELECT ?, item_no, digest, data"
    " FROM remem_cp_items WHERE tid = ?",
    "INSERT INTO remem_cp_lists (tid, list_no, base_no, body) SELECT ?, list_no, base_no, body"
    " FROM remem_cp_lists WHERE tid = ?",
    "INSERT INTO remem_cp_checkpoints (tid, ns, checkpoint_id, parent_id, run_id, body, metadata, seq)"
    " SELECT ?, ns, checkpoint_id, parent_id, run_id, body, metadata, seq FROM remem_cp_checkpoints WHERE tid = ?",
    "INSERT INTO remem_cp_writes (tid, ns, checkpoint_id, task_id, idx, channel, task_path, value)"
    " SELECT ?, ns, checkpoint_id, task_id, idx, channel, task_path, value FROM remem_cp_writes WHERE tid = ?",
)
COUNT_CHECKPOINTS = "SELECT COUNT(*) FROM remem_cp_checkpoints WHERE tid = ?"


@dataclass(frozen=True)
class Dialect:
    """What differs between SQLite and PostgreSQL: placeholders, list parameters, DDL, locking."""

    name: _migrate.Dialect
    for_update: str
    length: str

    def sql(self, text: str) -> str:
        """``text`` with this driver's placeholders."""
        return text if self.name == "sqlite" else text.replace("?", "%s")

    def in_list(self, column: str) -> str:
        """A condition ``column IN <one list parameter>`` (pass the list through :meth:`list_param`)."""
        if self.name == "sqlite":
            return f"{column} IN (SELECT value FROM json_each(?))"
        return f"{column} = ANY(?)"

    def list_param(self, values: Sequence[Any]) -> Any:
        return json.dumps(list(values)) if self.name == "sqlite" else list(values)

    def thread_lock(self) -> str:
        """Reads a thread's row, locking it against other writers until the transaction ends."""
        return FIND_THREAD + self.for_update

    def items_in(self) -> str:
        return f"SELECT item_no, data FROM remem_cp_items WHERE tid = ? AND {self.in_list('item_no')}"

    def items_with_digests(self) -> str:
        """The (item number, digest) of a thread's items among :data:`DIGESTS_RUN` digests, passed with
        :meth:`digests_param` (SQLite's JSON cannot carry bytes, so it gets one placeholder each)."""
        if self.name == "sqlite":
            marks = ", ".join("?" * DIGESTS_RUN)
            return f"SELECT item_no, digest FROM remem_cp_items WHERE tid = ? AND digest IN ({marks})"
        return (
            "SELECT item_no, digest FROM remem_cp_items"
            f" WHERE tid = ? AND {_DIGEST_PREFIX} = ANY(?) AND digest = ANY(?)"
        )

    def digests_param(self, tid: int, digests: Sequence[bytes]) -> tuple[Any, ...]:
        """The parameters of :meth:`items_with_digests` for at most :data:`DIGESTS_RUN` digests (a short
        run repeats its first, so that the statement text stays one)."""
        if self.name != "sqlite":
            prefixes = [int.from_bytes((d + bytes(8))[:8], "big", signed=True) for d in digests]
            return (tid, prefixes, list(digests))
        return (tid, *digests, *[digests[0]] * (DIGESTS_RUN - len(digests)))

    def patched_items(self) -> str:
        """(item number, first bytes) of a thread's items stored after a base (:func:`~._codec.patch_base`),
        whose first byte is the second parameter."""
        head = "substr(data, 1, 10)" if self.name == "sqlite" else "substring(data from 1 for 10)"
        first = "substr(data, 1, 1)" if self.name == "sqlite" else "substring(data from 1 for 1)"
        return f"SELECT item_no, {head} FROM remem_cp_items WHERE tid = ? AND {first} = ?"

    def lists_in(self) -> str:
        return (
            f"SELECT list_no, base_no, body FROM remem_cp_lists WHERE tid = ? AND {self.in_list('list_no')}"
        )

    def writes_in(self) -> str:
        return (
            "SELECT checkpoint_id, task_id, idx, channel, task_path, value FROM remem_cp_writes"
            f" WHERE tid = ? AND ns = ? AND {self.in_list('checkpoint_id')}"
        )

    def delete_in(self, table: str, column: str) -> str:
        return f"DELETE FROM {table} WHERE tid = ? AND {self.in_list(column)}"

    def runs_in(self) -> str:
        return (
            "SELECT DISTINCT c.tid, t.thread_id FROM remem_cp_checkpoints c JOIN remem_cp_threads t"
            f" ON t.tid = c.tid WHERE {self.in_list('c.run_id')} ORDER BY c.tid"
        )

    def list_page(self, *, thread: bool, ns: bool, checkpoint_id: bool, before: bool, cursor: bool) -> str:
        """One page of ``list()``, newest first; each flag adds a condition with its parameters in order."""
        conds = []
        if thread:
            conds.append("t.thread_id = ?")
        if ns:
            conds.append("c.ns = ?")
        if checkpoint_id:
            conds.append("c.checkpoint_id = ?")
        if before:
            conds.append("c.checkpoint_id < ?")
        if cursor:
            conds.append("(c.checkpoint_id, c.tid, c.ns) < (?, ?, ?)")
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        return (
            f"SELECT {_CHECKPOINT_COLUMNS} FROM remem_cp_checkpoints c JOIN remem_cp_threads t ON t.tid = c.tid"
            f" {where} ORDER BY c.checkpoint_id DESC, c.tid DESC, c.ns DESC LIMIT ?"
        )

    def stats(self) -> tuple[str, ...]:
        """Per-thread counts and bytes: threads, checkpoints, writes, lists, items (each grouped by tid)."""
        n = self.length
        return (
            "SELECT tid, thread_id, created_at, updated_at FROM remem_cp_threads",
            "SELECT tid, COUNT(*), COALESCE(SUM("
            f"{n}(body) + {n}(metadata) + {n}(checkpoint_id) + {n}(ns) + COALESCE({n}(parent_id), 0)), 0)"
            " FROM remem_cp_checkpoints GROUP BY tid",
            f"SELECT tid, COUNT(*), COALESCE(SUM({n}(value) + {n}(task_id) + {n}(checkpoint_id) + 16), 0)"
            " FROM remem_cp_writes GROUP BY tid",
            f"SELECT tid, COUNT(*), COALESCE(SUM({n}(body)), 0) FROM remem_cp_lists GROUP BY tid",
            f"SELECT tid, COUNT(*), COALESCE(SUM({n}(data) + {n}(digest)), 0) FROM remem_cp_items GROUP BY tid",
        )


SQLITE = Dialect("sqlite", for_update="", length="length")
POSTGRES = Dialect("postgres", for_update=" FOR UPDATE", length="octet_length")
