"""SQLite stores: the stdlib ``sqlite3`` with FTS5 for keywords and an exact NumPy search over cached vectors.

    from remem.store import SqliteStore
    with SqliteStore.from_conn_string("memory.db", index={"dims": 384, "embed": default_embedder()}) as store:
        store.put(("users", "u1", "memories"), "m1", {"text": "prefers green tea"})
        store.hybrid_search(("users", "u1"), "what does the user drink?")

The file runs in WAL mode with ``synchronous=NORMAL`` (a put commits in well under a millisecond) and
``secure_delete`` on, so that erased rows are overwritten; :meth:`SqliteStore.forget` also rebuilds the
keyword index and VACUUMs, leaving no byte of forgotten text in the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from langgraph.store.base import IndexConfig, Op, PutOp, Result, TTLConfig

from remem import _migrate
from remem._files import make_private_file
from remem._url import display_url, parse_database_url
from remem.checkpoint import sqlite as _checkpoint_sqlite
from remem.errors import ConfigError, StorageError
from remem.store import _core as core
from remem.store import _program as prog
from remem.store import _schema as schema
from remem.store._base import AsyncStore, RememStoreBase, SyncStore
from remem.store._core import SearchMode
from remem.store._vectors import VectorMatrix

__all__ = ["AsyncSqliteStore", "SqliteStore"]

logger = logging.getLogger(__name__)

# The checkpointers' busy timeout: every part sharing a file waits as long for its write lock.
BUSY_TIMEOUT_MS = _checkpoint_sqlite.BUSY_TIMEOUT_MS


class SqliteDialect(prog.Dialect):
    name = "sqlite"

    def ids_condition(self, col: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
        return f"{col} IN (SELECT value FROM json_each(?))", [json.dumps([int(i) for i in ids])]

    def filter_condition(self, key: str, kind: str, value: Any) -> tuple[str, list[Any]]:
        path = f'$."{key}"'  # key matched ^[A-Za-z_][A-Za-z0-9_]*$ before it got here; it is bound anyway
        types = "('text')" if kind == "str" else "('integer', 'real', 'true', 'false')"
        return f"(json_type(i.value, ?) IN {types} AND json_extract(i.value, ?) = ?)", [path, path, value]

    def upsert_parts(self) -> tuple[str, list[str], str]:
        return (
            "ns_id, key, value, created_at, updated_at, expires_at, ttl_minutes",
            ["?"] * 7,
            "ON CONFLICT (ns_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, "
            "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
        )

    def upsert_params(
        self, ns_id: int, key: str, value: dict[str, Any], text: str, now: float, ttl: float | None
    ) -> list[Any]:
        from remem.store import _core as core

        return [ns_id, key, core.dumps(value), now, now, core.expiry(ttl, now), ttl]

    def keyword_writes(self, rows: list[tuple[int, str]]) -> list[prog.Sql | prog.Many]:
        # OR REPLACE: FTS5 deletes the item's old row itself, one statement instead of a delete and an insert
        return [prog.Many("INSERT OR REPLACE INTO remem_fts (rowid, text) VALUES (?, ?)", rows)]

    def keyword_deletes(self, ids: Sequence[int]) -> list[prog.Sql]:
        cond, params = self.ids_condition("rowid", ids)
        return [prog.Sql(f"DELETE FROM remem_fts WHERE {cond}", params, fetch=False)]


def _varint(data: bytes) -> int:
    """SQLite's varint (big-endian, 7 bits a byte, the ninth byte whole): FTS5 stores its row count so."""
    value = 0
    for i, byte in enumerate(data[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


def _phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def connect(conn_string: str | Path) -> sqlite3.Connection:
    """Open a SQLite file (``sqlite:///path``, a plain path, ``:memory:`` or ``memory://``) for a store.

    A new file is created owner-only (with its folder) before SQLite opens it.
    """
    parsed = parse_database_url(conn_string)
    if parsed.kind == "postgres":
        raise ConfigError(
            f"{display_url(conn_string)} is a PostgreSQL URL; open it with PostgresStore (or open_store)"
        )
    target = ":memory:" if parsed.kind == "memory" else parsed.target
    try:
        make_private_file(Path(target))
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(
            f"cannot open SQLite database {target!r}: {exc}; check that its folder exists and is writable"
        ) from exc
    return conn


def _database_file(conn: sqlite3.Connection) -> str:
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return "the SQLite database"
    return repr(row[2]) if row and row[2] else "the in-memory SQLite database"


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _storage_error(conn: sqlite3.Connection, exc: sqlite3.Error) -> StorageError:
    """What went wrong, in words that say what to do: a busy file is not a permission problem."""
    where = _database_file(conn)
    if _is_busy(exc):
        return StorageError(
            f"{where} is busy: another process (or connection) holds its write lock and kept it past the "
            f"{BUSY_TIMEOUT_MS / 1000:g} s busy timeout ({exc}); retry, and look for a process that keeps a "
            "write transaction open (a long import, a crashed tool holding the file, a `sqlite3` shell)"
        )
    return StorageError(
        f"SQLite refused the work on {where}: {exc}; check that the file is a remem database, not "
        "corrupt, on a disk with space, and writable"
    )


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (readers never wait for the writer). Changing the journal mode needs the file
    to itself and does not wait on the busy timeout, so processes opening a fresh file at once retry."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if row and str(row[0]).lower() in ("wal", "memory"):
                return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("database is locked")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class _SqliteBackend(RememStoreBase):
    """What :class:`SqliteStore` and :class:`AsyncSqliteStore` share: everything but their lifecycle API."""

    MIGRATIONS: ClassVar[list[str]] = schema.statements("sqlite")
    """The schema statements, in order (LangGraph's stores expose theirs under this name)."""

    dialect = SqliteDialect()

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        keyword_budget: int = 2000,
        commit_interval: float | None = None,
        max_pending: int = 1000,
    ) -> None:
        super().__init__(index=index, ttl=ttl, search_mode=search_mode)
        self.conn = conn
        self.commit_interval = commit_interval
        self.max_pending = max_pending
        self._pending: list[PutOp] = []
        self._flush_timer: threading.Timer | None = None
        self._flush_error: BaseException | None = None
        conn.isolation_level = None
        self._is_setup = False
        self._matrix: VectorMatrix | None = None
        self._data_version: int | None = None
        self._df: dict[str, tuple[int, int]] = {}  # term -> (items containing it, index size then)
        self._ns_sizes: tuple[int, dict[int, int]] = (-1, {})  # (index size then, items per namespace)
        self.keyword_budget = keyword_budget

    def _setup_now(self) -> None:
        with self._lock:
            if self._is_setup:
                return
            c = self.conn
            try:
                self._setup_locked(c)
            except BaseException as exc:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _storage_error(c, exc) from exc
                raise
            self._is_setup = True

    def _setup_locked(self, c: sqlite3.Connection) -> None:
        c.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
        _enable_wal(c)
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("PRAGMA secure_delete = ON")
        # keyword search joins each full-text match to its item row (namespace, TTL): with the default
        # 2 MB page cache those lookups mostly miss at 100k items, and cost several times more
        c.execute("PRAGMA cache_size = -32768")
        # one BEGIN IMMEDIATE transaction: processes opening a fresh file together take turns
        _migrate.run_sqlite(c, schema.COMPONENT)

    # -------------------------------------------------- group commit

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ops. With ``commit_interval``, a batch of puts only is queued and committed with others
        within that many seconds (or at ``max_pending`` puts); any read, search, erasure or close commits the
        queue first, so this store always reads its own writes. A crash loses at most the queued puts."""
        ops = list(ops)
        if not self.commit_interval or not ops or not all(isinstance(op, PutOp) for op in ops):
            return super().batch(ops)
        puts = [op for op in ops if isinstance(op, PutOp)]
        for put in puts:
            prog.check_put(put, encode=True)  # refuse bad input now, not in the background
        with self._lock:
            self._raise_flush_error()
            self._pending.extend(puts)
            if len(self._pending) >= self.max_pending:
                self._flush_locked()
            elif self._flush_timer is None:
                self._flush_timer = threading.Timer(self.commit_interval, self._flush_in_background)
                self._flush_timer.daemon = True
                self._flush_timer.start()
        return [None] * len(ops)

    def flush(self) -> None:
        """Commit the puts queued by ``commit_interval`` now."""
        with self._lock:
            self._flush_locked()
            self._raise_flush_error()

    def _flush_locked(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._pending:
            pending, self._pending = self._pending, []
            try:
                ready = self._embed_ahead(list(pending), self.search_mode)
                super()._run(
                    lambda: prog.batch_program(self.dialect, self.plan, pending, self.search_mode, ready),
                    write=True,
                )
            except BaseException:
                self._pending = pending + self._pending  # keep them for the next try
                raise

    def _flush_in_background(self) -> None:
        with self._lock:
            self._flush_timer = None
            try:
                self._flush_locked()
            except Exception as exc:
                logger.warning("committing queued puts failed (kept for the next try): %s", exc)
                self._flush_error = exc

    def _raise_flush_error(self) -> None:
        if self._flush_error is not None:
            error, self._flush_error = self._flush_error, None
            raise error

    def _run(self, make: Callable[[], prog.Program], *, write: bool, snapshot: bool = True) -> Any:
        with self._lock:
            if self._pending:
                self._flush_locked()
            return super()._run(make, write=write, snapshot=snapshot)

    # -------------------------------------------------- I/O hooks

    @contextlib.contextmanager
    def _transaction(self, write: bool, snapshot: bool = True) -> Iterator[None]:
        if not self._is_setup:
            self._setup_now()
        try:
            # A writer from the start: a deferred transaction that later writes cannot wait for the lock
            # (SQLite fails it at once to avoid a deadlock), BEGIN IMMEDIATE waits for the busy timeout.
            self.conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield
            except BaseException:
                self.conn.execute("ROLLBACK")
                self._matrix = None  # the cache may hold rolled-back vectors
                raise
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.conn.in_transaction:  # the COMMIT itself failed
                self._matrix = None
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
            raise _storage_error(self.conn, exc) from exc

    def _execute(self, request: prog.Sql | prog.Many) -> Any:
        if isinstance(request, prog.Many):
            if request.rows:
                self.conn.executemany(request.sql, request.rows)
            return None
        cur = self.conn.execute(request.sql, list(request.params))
        return cur.fetchall() if request.fetch else cur.rowcount

    # -------------------------------------------------- keyword search

    def _fts_rows(self) -> int:
        row = self.conn.execute("SELECT block FROM remem_fts_data WHERE id = 1").fetchone()
        return _varint(bytes(row[0])) if row and row[0] else 0

    def _doc_frequency(self, term: str, rows: int) -> int:
        cached = self._df.get(term)
        if cached is not None and abs(cached[1] - rows) <= rows // 10:
            return cached[0]
        count = int(
            self.conn.execute(
                "SELECT count(*) FROM remem_fts WHERE remem_fts MATCH ?", [_phrase(term)]
            ).fetchone()[0]
        )
        if len(self._df) > 50_000:
            self._df.clear()
        self._df[term] = (count, rows)
        return count

    def _keyword_search(self, request: prog.KwSearch) -> list[tuple[int, float]]:
        rows = self._fts_rows()
        df = None if rows <= self.keyword_budget else {t: self._doc_frequency(t, rows) for t in request.terms}
        narrow = request.item_ids is not None or self._is_narrow(request.ns_ids, rows)
        ranked = self._ranked if narrow else self._ranked_then_filtered
        newest: int | None = None
        for attempt in core.plan_keyword(request.terms, df, rows, self.keyword_budget):
            match = (" AND " if attempt.every else " OR ").join(_phrase(t) for t in attempt.terms)
            lowest = None
            if attempt.newest is not None:
                if newest is None:
                    newest = int(
                        self.conn.execute("SELECT coalesce(max(id), 0) FROM remem_items").fetchone()[0]
                    )
                lowest = newest - attempt.newest
            found = ranked(match, lowest, request)
            if found and (attempt.partial or len(found) >= request.k):
                return found
        return []

    def _is_narrow(self, ns_ids: list[int] | None, rows: int) -> bool:
        """Whether these namespaces hold under half the items. Then the namespace is checked while ranking
        (``_ranked``); otherwise most matches are in it anyway, and ranking everything first then checking
        the best few (``_ranked_then_filtered``) skips a row lookup per match. Both give the same results,
        so the item counts are only refreshed when the index has grown or shrunk by a tenth."""
        if ns_ids is None:
            return False
        seen, sizes = self._ns_sizes
        if abs(seen - rows) > rows // 10 or seen < 0:
            counted = self.conn.execute("SELECT ns_id, count(*) FROM remem_items GROUP BY ns_id").fetchall()
            sizes = {int(r[0]): int(r[1]) for r in counted}
            self._ns_sizes = (rows, sizes)
        return 2 * sum(sizes.get(i, 0) for i in set(ns_ids)) < sum(sizes.values())

    def _ranked_then_filtered(
        self, match: str, lowest: int | None, request: prog.KwSearch
    ) -> list[tuple[int, float]]:
        """The ``k`` best live matches in the namespaces asked for: the whole index ranked, then filtered,
        ranking deeper until ``k`` pass or the matches run out."""
        base = "SELECT rowid, -bm25(remem_fts) FROM remem_fts WHERE remem_fts MATCH ?"
        params: list[Any] = [match]
        if lowest is not None:
            base += " AND rowid > ?"
            params.append(lowest)
        limit = max(request.k * 4, 64)
        while True:
            rows = self.conn.execute(base + " ORDER BY rank LIMIT ?", [*params, limit]).fetchall()
            found = self._live(rows, request)
            if len(found) >= request.k or len(rows) < limit:
                return found[: request.k]
            limit *= 8

    def _live(self, rows: list[Any], request: prog.KwSearch) -> list[tuple[int, float]]:
        """The rows whose items are live and in the namespaces asked for, in rank order."""
        if not rows:
            return []
        sql = (
            "SELECT id FROM remem_items WHERE id IN (SELECT value FROM json_each(?)) "
            "AND (expires_at IS NULL OR expires_at > ?)"
        )
        params: list[Any] = [json.dumps([r[0] for r in rows]), request.now]
        if request.ns_ids is not None:
            sql += " AND ns_id IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(request.ns_ids))
        keep = {r[0] for r in self.conn.execute(sql, params)}
        return [(int(r[0]), float(r[1])) for r in rows if r[0] in keep]

    def _ranked(self, match: str, lowest: int | None, request: prog.KwSearch) -> list[tuple[int, float]]:
        """The ``k`` best live matches in the namespaces (and items) asked for, best first.

        The namespace, TTL and item conditions are checked in the same query, before ranking, so a search
        under a small namespace computes bm25 only for its own matches instead of ranking the whole index
        and throwing most of it away. CROSS JOIN keeps the full-text match as the outer loop: driving from
        the items instead would re-run the match once per item.
        """
        sql = (
            "SELECT f.rowid, -bm25(remem_fts) AS score FROM remem_fts f CROSS JOIN remem_items i "
            "ON i.id = f.rowid WHERE remem_fts MATCH ? AND (i.expires_at IS NULL OR i.expires_at > ?)"
        )
        params: list[Any] = [match, request.now]
        if lowest is not None:
            sql += " AND f.rowid > ?"
            params.append(lowest)
        if request.ns_ids is not None:
            sql += " AND i.ns_id IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(request.ns_ids))
        if request.item_ids is not None:  # a filter already narrowed the items
            sql += " AND i.id IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(request.item_ids))
        # rowid breaks ties as FTS5's own rank order does (matches come in rowid order, the sort is stable)
        sql += " ORDER BY score DESC, f.rowid LIMIT ?"
        rows = self.conn.execute(sql, [*params, request.k]).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    # -------------------------------------------------- vector search

    def _load_matrix(self) -> VectorMatrix:
        assert self.plan is not None
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if self._matrix is None or version != self._data_version:
            matrix = VectorMatrix(self.plan.dims, metric=self.plan.distance)
            rows = self.conn.execute("SELECT item_id, ns_id, embedding FROM remem_vectors").fetchall()
            if rows:
                items = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                ns = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
                vecs = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                matrix.add(items, ns, vecs)
            self._matrix, self._data_version = matrix, version
        return self._matrix

    def _vector_search(self, request: prog.VecSearch) -> list[tuple[int, float]]:
        matrix = self._load_matrix()
        return matrix.search(request.query, request.k, ns_ids=request.ns_ids, item_ids=request.item_ids)

    def _vectors_changed(self, changes: list[prog.VecChanged]) -> None:
        if self._matrix is None:
            return
        for change in changes:
            self._matrix.remove(change.removed)
            if change.added:
                items = np.array([a[0] for a in change.added], dtype=np.int64)
                ns = np.array([a[1] for a in change.added], dtype=np.int64)
                vecs: npt.NDArray[np.float32] = np.vstack([a[2] for a in change.added]).astype(np.float32)
                self._matrix.add(items, ns, vecs)

    def _compact(self) -> bool:
        c = self.conn
        try:
            c.execute("INSERT INTO remem_fts (remem_fts) VALUES ('optimize')")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.execute("VACUUM")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise StorageError(
                f"the data was deleted but compacting the file failed: {exc}; run `VACUUM` on it when it is not busy"
            ) from exc
        self._data_version = c.execute("PRAGMA data_version").fetchone()[0]
        return True


class SqliteStore(_SqliteBackend, SyncStore):
    """A LangGraph ``BaseStore`` on one SQLite file, with keyword, vector and hybrid search, TTL and erasure."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str | Path,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        **options: Any,
    ) -> Iterator[SqliteStore]:
        """Open ``conn_string`` (a path, ``sqlite:///path`` or ``:memory:``), set it up, close it on exit."""
        conn = connect(conn_string)
        try:
            store = cls(conn, index=index, ttl=ttl, search_mode=search_mode, **options)
            store._setup_now()
            yield store
        finally:
            opened = locals().get("store")
            if opened is not None:
                opened.stop_ttl_sweeper(1)
                opened.flush()
            conn.close()


class AsyncSqliteStore(_SqliteBackend, AsyncStore):
    """Async version of :class:`SqliteStore`: the same store, its calls run in a worker thread.

    SQLite has no async protocol; like aiosqlite, this keeps the event loop free by running each batch in a
    thread (one at a time, under the store's lock).
    """

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str | Path,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        **options: Any,
    ) -> AsyncIterator[AsyncSqliteStore]:
        """Async version of :meth:`SqliteStore.from_conn_string`."""
        conn = await asyncio.to_thread(connect, conn_string)
        try:
            store = cls(conn, index=index, ttl=ttl, search_mode=search_mode, **options)
            await asyncio.to_thread(store._setup_now)
            yield store
        finally:
            opened = locals().get("store")
            if opened is not None:
                await opened.stop_ttl_sweeper(1)
                await asyncio.to_thread(opened.flush)
            await asyncio.to_thread(conn.close)
