"""SQLite stores: the stdlib ``sqlite3``, keyword search (``remem.store._keyword``), exact NumPy vector search.

    from remem.store import SqliteStore
    with SqliteStore.from_conn_string("memory.db", index={"dims": 384, "embed": default_embedder()}) as store:
        store.put(("users", "u1", "memories"), "m1", {"text": "prefers green tea"})
        store.hybrid_search(("users", "u1"), "what does the user drink?")

The file runs in WAL mode with ``synchronous=NORMAL`` (a put commits in well under a millisecond) and
``secure_delete`` on, so that erased rows are overwritten; :meth:`SqliteStore.forget` also VACUUMs,
leaving no byte of forgotten text in the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt
from langgraph.store.base import IndexConfig, Op, PutOp, Result, TTLConfig

from remem import _migrate, _sqlite
from remem._files import make_private_file
from remem._lease import close_idle_connections, retain_idle_connections
from remem._lease_target import LeaseTarget
from remem._statements import Execute, drive, execute
from remem._url import display_url, parse_database_url
from remem.errors import ConfigError, NotFoundError, StorageError
from remem.layout import STORE_VECTOR_CHANGES_TABLE
from remem.store import _blocks, _embedder, _rows, _write
from remem.store import _core as core
from remem.store import _schema as schema
from remem.store._async import AsyncStore
from remem.store._base import RememStoreBase, SyncStore, check_read_only_schema
from remem.store._core import SearchMode
from remem.store._exec import Hits, Program, Rows, Statement, Tx, Vector
from remem.store._reads import Transaction
from remem.store._schema import VECTORS
from remem.store._vectors import FEW_NAMESPACES, VectorMatrix, with_rows

__all__ = ["AsyncSqliteStore", "SqliteStore"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SqliteDialect(_rows.Dialect):
    name = "sqlite"

    def ids_condition(self, col: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
        return f"{col} IN (SELECT value FROM json_each(?))", [json.dumps([int(i) for i in ids])]

    def filter_condition(self, key: str, kind: str, value: Any) -> tuple[str, list[Any]]:
        path = f'$."{key}"'  # key matched ^[A-Za-z_][A-Za-z0-9_]*$ before it got here; it is bound anyway
        types = "('text')" if kind == "str" else "('integer', 'real', 'true', 'false')"
        return f"(json_type(i.value, ?) IN {types} AND json_extract(i.value, ?) = ?)", [path, path, value]

    def vectors_written(self, ns_ids: Sequence[int], dims: int) -> Program[None]:
        yield from _blocks.pack_program(ns_ids, dims)

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
        return [ns_id, key, core.dumps(value), now, now, core.expiry(ttl, now), ttl]


def connect(conn_string: str | Path, *, read_only: bool = False) -> sqlite3.Connection:
    """Open a SQLite file (``sqlite:///path``, a plain path, ``:memory:`` or ``memory://``) for a store.

    A new file is created owner-only (with its folder) before SQLite opens it. ``read_only``: an existing
    file is opened with ``mode=ro`` and nothing is created (a missing file is a NotFoundError).
    """
    parsed = parse_database_url(conn_string)
    if parsed.kind == "postgres":
        raise ConfigError(
            f"{display_url(conn_string)} is a PostgreSQL URL; open it with PostgresStore (or open_store)"
        )
    target = ":memory:" if parsed.kind == "memory" else parsed.target
    uri = False
    if read_only and target != ":memory:":
        if not parsed.sqlite_path.is_file():
            raise NotFoundError(f"there is no database at {target}; check --db or REMEM_DATABASE_URL")
        target, uri = f"file:{urllib.parse.quote(str(parsed.sqlite_path.resolve()))}?mode=ro", True
    try:
        if not uri:
            make_private_file(Path(target))
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, uri=uri)
        conn.execute(f"PRAGMA busy_timeout = {int(_sqlite.BUSY_TIMEOUT_MS)}")
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(
            f"cannot open SQLite database {target!r}: {exc}; check that its folder exists and is writable"
        ) from exc
    return conn


def _storage_error(conn: sqlite3.Connection, exc: sqlite3.Error) -> StorageError:
    return _sqlite.storage_error(exc, where=_sqlite.database_file(conn), doing="the store operation")


class _SqliteBackend(RememStoreBase):
    """What :class:`SqliteStore` and :class:`AsyncSqliteStore` share: everything but their lifecycle API."""

    MIGRATIONS: ClassVar[list[str]] = schema.statements("sqlite")
    """The schema statements, in order (LangGraph's stores expose theirs under this name)."""
    _refresh_unset = False  # as stock SqliteStore: a TTLConfig without refresh_on_read does not refresh

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
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(index=index, ttl=ttl, search_mode=search_mode, clock=clock)
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
        # remem_vectors' change count the matrix holds (None: not known, or a file without the count)
        self._vector_changes: int | None = None
        self.dialect = SqliteDialect(keyword_budget)
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

    def _where(self) -> str:
        return _sqlite.database_file(self.conn)

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.sqlite(self.conn, where=self._where())

    def _setup_locked(self, c: sqlite3.Connection) -> None:
        c.execute(f"PRAGMA busy_timeout = {int(_sqlite.BUSY_TIMEOUT_MS)}")
        if self.read_only:  # check, create nothing
            check_read_only_schema(
                drive(_migrate.check(schema.COMPONENT, "sqlite"), self._execute), self._where()
            )
            if self.plan is not None:
                drive(_embedder.open_program(self.dialect, self.plan, True, self._where()), self._execute)
            return
        _sqlite.enable_wal(c)
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("PRAGMA secure_delete = ON")
        # keyword search joins each full-text match to its item row (namespace, TTL): with the default
        # 2 MB page cache those lookups mostly miss at 100k items, and cost several times more
        c.execute("PRAGMA cache_size = -32768")
        # a put dirties ~18 pages (one per keyword's index leaf); checkpointing the WAL every 4,000 pages
        # instead of SQLite's 1,000 costs a quarter of the checkpoints (each with its fsync) and rewrites the
        # hot pages fewer times: single puts ran 20-30% faster; the WAL may reach 16 MB before it resets
        c.execute("PRAGMA wal_autocheckpoint = 4000")
        # one BEGIN IMMEDIATE transaction: processes opening a fresh file together take turns
        c.execute("BEGIN IMMEDIATE")
        drive(_migrate.upgrade(schema.COMPONENT, "sqlite"), self._execute)
        drive(_write.reindex_program(self.dialect), self._execute)
        if self.plan is not None:
            drive(_embedder.open_program(self.dialect, self.plan, False, self._where()), self._execute)
        c.execute("COMMIT")

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
            _write.check_put(put, encode=True)  # refuse bad input now, not in the background
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
                super()._run(self._batch_program(list(pending)), write=True, ready=ready)
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

    def _run(
        self,
        make: Callable[[Tx], Program[T]],
        *,
        write: bool,
        snapshot: bool = True,
        ready: Mapping[bytes, Vector] | None = None,
        transaction: Transaction | None = None,
        touched: list[int] | None = None,
    ) -> T:
        with self._lock:
            if self._pending:
                self._flush_locked()
            return super()._run(
                make, write=write, snapshot=snapshot, ready=ready, transaction=transaction, touched=touched
            )

    # -------------------------------------------------- I/O hooks

    @contextlib.contextmanager
    def _transaction(self, write: bool, snapshot: bool = True) -> Iterator[Execute]:
        if not self._is_setup:
            self._setup_now()
        if not write and not snapshot:  # statements alone, each in its own implicit read: no BEGIN, COMMIT
            try:
                yield self._execute
            except sqlite3.Error as exc:
                raise _storage_error(self.conn, exc) from exc
            return
        try:
            # A writer from the start: a deferred transaction that later writes cannot wait for the lock
            # (SQLite fails it at once to avoid a deadlock), BEGIN IMMEDIATE waits for the busy timeout.
            self.conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            cached = write and self._matrix is not None
            try:
                if cached:
                    drive(self._matrix_still_valid(), self._execute)
                yield self._execute
                # This transaction's own vector changes reach the matrix in place (_vectors_changed): the
                # count it commits is the matrix's (read under the write lock, so it is no one else's).
                changes = drive(_vector_changes(), self._execute) if cached else None
            except BaseException:
                self.conn.execute("ROLLBACK")
                self._matrix = None  # the cache may hold rolled-back vectors
                raise
            self.conn.execute("COMMIT")
            if cached and self._matrix is not None:
                self._vector_changes = changes
        except sqlite3.Error as exc:
            if self.conn.in_transaction:  # the COMMIT itself failed
                self._matrix = None
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
            raise _storage_error(self.conn, exc) from exc

    def _execute(self, request: Statement) -> Rows:
        return execute(self.conn.cursor(), request)

    # -------------------------------------------------- vector search

    def _vectors(self) -> _MatrixSearch:
        return _MatrixSearch(self)

    def _matrix_still_valid(self) -> Program[None]:
        """Drop the matrix if another connection changed a vector since it was read; a commit elsewhere
        that changed none (a thread lease's fencing token, in the same file) keeps it."""
        version = (yield Statement("PRAGMA data_version"))[0][0]
        if self._matrix is None or version == self._data_version:
            return
        changes = yield from _vector_changes()
        if changes is not None and changes == self._vector_changes:
            self._data_version = version
        else:
            self._matrix = None

    def _vectors_changed(self, tx: Tx) -> None:
        matrix = self._matrix
        if matrix is None:
            return
        for change in tx.changes:
            matrix.remove(change.removed)
            # a namespace the matrix does not hold is read whole when first searched, new rows with it
            added = [a for a in change.added if matrix.holds(a[1])]
            if added:
                items = np.array([a[0] for a in added], dtype=np.int64)
                ns = np.array([a[1] for a in added], dtype=np.int64)
                vecs: npt.NDArray[np.float32] = np.vstack([a[2] for a in added]).astype(np.float32)
                matrix.add(items, ns, vecs)

    def _compact(self) -> bool:
        c = self.conn
        try:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.execute("VACUUM")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise StorageError(
                f"the data was deleted but compacting the file failed: {exc}; run `VACUUM` on it when it is not busy"
            ) from exc
        self._data_version = c.execute("PRAGMA data_version").fetchone()[0]
        return True


class _MatrixSearch:
    """The exact NumPy search over the store's in-process matrix, which holds the namespaces searched so
    far (read from their blocks, :mod:`remem.store._blocks`); dropped when another connection changed a
    vector since it was read (``PRAGMA data_version`` and schema v5's count)."""

    def __init__(self, store: _SqliteBackend) -> None:
        self.store = store

    def search(
        self, query: Vector, k: int, ns_ids: list[int] | None, item_ids: list[int] | None
    ) -> Program[Hits]:
        if item_ids is not None and ns_ids is None:
            return (yield from self._items(query, k, item_ids))
        # past a few namespaces, the matrix masks rows: it holds them all
        wanted = None if ns_ids is None or len(ns_ids) > FEW_NAMESPACES else ns_ids
        matrix = yield from self._matrix(wanted)
        return matrix.search(query, k, ns_ids=ns_ids, item_ids=item_ids)

    def _items(self, query: Vector, k: int, item_ids: list[int]) -> Program[Hits]:
        """A few given items (of any namespace): those the matrix holds scored there, the others from
        their rows, so that scoring a keyword hit loads no namespace."""
        store = self.store
        assert store.plan is not None
        matrix = yield from self._matrix([])
        held = matrix.held(item_ids)
        hits = matrix.search(query, k, item_ids=sorted(held)) if held else []
        others = [] if matrix.everything else [i for i in dict.fromkeys(item_ids) if i not in held]
        if others:
            rows = yield Statement(
                f"SELECT item_id, embedding FROM {VECTORS} WHERE item_id IN (SELECT value FROM json_each(?)) "
                "AND length(embedding) = ?",
                (json.dumps(others), store.plan.dims * 4),
            )
            hits = with_rows(hits, rows, query, k, matrix.metric)
        return hits

    def _matrix(self, ns_ids: Sequence[int] | None) -> Program[VectorMatrix]:
        """The matrix, holding at least these namespaces (None: all)."""
        store = self.store
        assert store.plan is not None
        yield from store._matrix_still_valid()
        version = (yield Statement("PRAGMA data_version"))[0][0]
        if store._matrix is None or version != store._data_version:
            changes = yield from _vector_changes()  # in the load's snapshot
            store._matrix = VectorMatrix(store.plan.dims, metric=store.plan.distance, capacity=1)
            store._data_version, store._vector_changes = version, changes
        matrix = store._matrix
        if matrix.everything:
            return matrix
        every = ns_ids is None
        if ns_ids is None:
            ns_ids = [int(r[0]) for r in (yield Statement(f"SELECT DISTINCT ns_id FROM {VECTORS}"))]
        missing = [n for n in dict.fromkeys(ns_ids) if n not in matrix.loaded]
        if missing:
            # another part of the file may index with another model: only vectors of this size are ours
            yield from _blocks.load_program(missing, store.plan.dims, matrix)
            matrix.loaded.update(missing)
        matrix.everything = matrix.everything or every
        return matrix


def _vector_changes() -> Program[int | None]:
    """How many times remem_vectors changed (store schema v5's count); None in a file without it (a
    read-only store on an older file)."""
    found = yield Statement(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (STORE_VECTOR_CHANGES_TABLE,)
    )
    if not found[0][0]:
        return None
    rows = yield Statement(f"SELECT changes FROM {STORE_VECTOR_CHANGES_TABLE} WHERE id = 0")
    return int(rows[0][0]) if rows else None


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
        read_only: bool = False,
        **options: Any,
    ) -> Iterator[SqliteStore]:
        """Open ``conn_string`` (a path, ``sqlite:///path`` or ``:memory:``), set it up, close it on exit.

        ``read_only=True`` (for commands that only read): the file is opened with ``mode=ro``, nothing is
        created, writes are refused, and a missing file or store raises :class:`~remem.errors.NotFoundError`.
        """
        conn = connect(conn_string, read_only=read_only)
        kept: LeaseTarget | None = None
        try:
            store = cls(conn, index=index, ttl=ttl, search_mode=search_mode, **options)
            store.read_only = read_only
            store._setup_now()
            kept = store.lease_target
            retain_idle_connections(kept)  # the memory client's leases' connection, while the store is open
            yield store
        finally:
            opened = locals().get("store")
            if opened is not None:
                opened.stop_ttl_sweeper(1)
                opened.flush()
            if kept is not None:
                close_idle_connections(kept)
            conn.close()


class AsyncSqliteStore(_SqliteBackend, AsyncStore):
    """Async version of :class:`SqliteStore`: the same store, its calls run in a worker thread.

    The stdlib ``sqlite3`` has no async driver, so (like aiosqlite) this keeps the event loop free by running
    each batch in a worker thread, one at a time under the store's lock; concurrent ``abatch`` calls are
    combined first, as on every async store.
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
        read_only: bool = False,
        **options: Any,
    ) -> AsyncIterator[AsyncSqliteStore]:
        """Async version of :meth:`SqliteStore.from_conn_string`."""
        conn = await asyncio.to_thread(connect, conn_string, read_only=read_only)
        kept: LeaseTarget | None = None
        try:
            store = cls(conn, index=index, ttl=ttl, search_mode=search_mode, **options)
            store.read_only = read_only
            await asyncio.to_thread(store._setup_now)
            kept = store.lease_target
            retain_idle_connections(kept)
            yield store
        finally:
            opened = locals().get("store")
            if opened is not None:
                await opened.stop_ttl_sweeper(1)
                await asyncio.to_thread(opened.flush)
            if kept is not None:
                await asyncio.to_thread(close_idle_connections, kept)
            await asyncio.to_thread(conn.close)
