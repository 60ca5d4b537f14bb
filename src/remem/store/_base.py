"""The base every remem store shares: LangGraph's ``BaseStore`` plus hybrid search, a generic delete, TTL sweeping.

A backend supplies a dialect and the few I/O hooks below (``_transaction``, its vector search); all store
logic lives in :mod:`remem.store._program` as programs (:mod:`remem.store._exec`) that ``_run`` drives.
:class:`SyncStore` adds the sync lifecycle; the async store is :mod:`remem.store._async`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from langgraph.store.base import BaseStore, IndexConfig, Op, PutOp, Result, SearchOp, TTLConfig

from remem._lease_target import LeaseTarget
from remem._statements import Execute, Program, Retry, retrying, run
from remem.embeddings import embed_array
from remem.errors import (
    ConfigError,
    EmbedderMismatchError,
    ModelError,
    NotFoundError,
    RememUsageError,
    StorageError,
)
from remem.store import _compact, _delete, _embedder, _rows, _search, _write
from remem.store import _core as core
from remem.store import _program as prog
from remem.store._compact import Compaction
from remem.store._core import IndexPlan, ScoredItem, SearchMode
from remem.store._delete import DeleteReport, Statements
from remem.store._exec import Tx, Vector, VectorSearch
from remem.store._reads import Reads, Transaction, shared_reads

T = TypeVar("T")
Fence = Callable[[Any], Program[None]]
"""A check run first in a batch's transaction, given the dialect's name (``"sqlite"``, ``"postgres"``)."""

logger = logging.getLogger(__name__)


class RememStoreBase(BaseStore):
    """What SqliteStore, PostgresStore and their async twins share.

    Where these stores differ from LangGraph's own on purpose (each difference pinned by a test in
    ``tests/test_store_stock.py``):

    - A query on a store with an index runs a hybrid search (keyword and vector ranks fused) unless the
      store is opened with ``search_mode="vector"``, which searches as LangGraph's stores do. Hybrid hits
      come in fused order; each hit's ``score`` is still its vector similarity (what a stock threshold
      compares), so scores need not descend; ``scores["fused"]`` is the fused value that orders them.
    - Filter keys never reach SQL (values are bound, keys are matched in Python unless they are plain
      identifiers), so keys that LangGraph's SQL stores refuse ("Invalid filter key") are matched literally.
    - The sync methods of an async store work on its event loop's thread too (LangGraph's raise
      ``InvalidStateError`` there, to avoid a deadlock that these stores cannot have).
    - The tables are remem's (``remem_ns``, ``remem_items``, ``remem_vectors``, and ``remem_fts`` on
      SQLite), not LangGraph's ``store`` table; ``MIGRATIONS`` lists remem's statements.
    - A listing without a query comes the most recently updated first, ties by namespace and key (as
      LangGraph's SqliteStore and PostgresStore; InMemoryStore lists in insertion order).
    - Vectors are stored as float32 whatever ``ann_index_config["vector_type"]`` says (``halfvec`` is
      accepted and stored at full precision).
    - An index path ``"keyword:PATH"`` (``remem.store.keyword_only``) is PATH's text in the item's keyword
      document, with no vector of its own; LangGraph's stores read it as a key of that name.
    """

    supports_ttl: bool = True
    supports_keyword_only: bool = True
    """An index path written ``keyword_only(path)`` goes into the keyword document alone (``KEYWORD_ONLY``)."""
    _lease_target: LeaseTarget | None = None
    dialect: _rows.Dialect
    read_only: bool = False
    """Opened with ``read_only=True``: nothing is created or written (reads do not refresh TTLs)."""

    def __init__(
        self,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        search_mode: SearchMode = "hybrid",
        clock: Callable[[], float] | None = None,
    ) -> None:
        if search_mode not in core.SEARCH_MODES:
            raise RememUsageError(
                f"unknown search mode {search_mode!r}; use one of {', '.join(core.SEARCH_MODES)}"
            )
        self.index_config = dict(index) if index else None
        self.plan = IndexPlan.from_config(index)
        self.embeddings = self.plan.embed if self.plan else None  # as LangGraph's stores name it
        self.ttl_config = ttl
        self.clock: Callable[[], float] = clock or time.time
        """Seconds since the epoch, for TTLs and timestamps (tests pass a clock they move themselves)."""
        self.search_mode: SearchMode = search_mode
        self._lock = threading.RLock()
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    @property
    def lease_target(self) -> LeaseTarget:
        """Where the memory client's thread leases on this store are held: the store's own database,
        found from the connection it holds (once)."""
        if self._lease_target is None:
            self._lease_target = self._find_lease_target()
        return self._lease_target

    # -------------------------------------------------- hooks a backend implements

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.in_process(self)

    def _where(self) -> str:
        """The database, as messages name it."""
        return "the database"

    def _transaction(self, write: bool, snapshot: bool = True) -> contextlib.AbstractContextManager[Execute]:
        """One transaction and the function that runs a statement in it; ``write``: it may write, so it
        starts as a writer (SQLite: BEGIN IMMEDIATE). ``snapshot=False``: a read whose statements need not
        share one snapshot (a backend may save the round trips of BEGIN and COMMIT)."""
        raise NotImplementedError

    def _vectors(self) -> VectorSearch:
        """The vector search programs call (``Tx.vectors``)."""
        raise NotImplementedError

    def _in_transaction(self, program: Program[T], tx: Tx) -> Program[T]:
        """The program a run executes in its transaction: ``program``, to which a backend may add its
        own last statements (PostgreSQL's vector cache reads the change counts a write moved)."""
        return program

    def _vectors_changed(self, tx: Tx) -> None:
        """Called after a commit that changed vectors (``tx.changes``): an in-process cache applies them."""

    def _compact(self) -> bool:
        """Make deleted bytes unrecoverable from storage (VACUUM and friends); True if done."""
        return False

    def _serial(self) -> contextlib.AbstractContextManager[Any]:
        """What a sync call's transaction runs under: the store's lock (one connection, one transaction at
        a time); a backend on a pool, where each transaction borrows a connection of its own, needs none."""
        return self._lock

    # -------------------------------------------------- driver

    def _check_writable(self, write: bool) -> None:
        if write and self.read_only:
            raise ConfigError(
                f"this store opened {self._where()} read-only; open it without read_only=True to write"
            )

    retry: Retry | None = None
    """The sync driver's rule for running a call's transaction again (PostgreSQL: once, after losing a
    connection the store can open again); set by the backend, used by :meth:`_run` only."""

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
        """Run the program ``make(tx)`` builds in one transaction (built again to retry, or after embedding
        what it found unembedded); ``ready``: the vectors embedded ahead for it; ``transaction``: where it
        runs when not in a transaction of its own (a read session's, :meth:`reading`); ``touched``: where
        that session collects the items whose TTL its reads refresh, to refresh them after it closes (a
        write nested in its transaction would be lost with it); without it the run refreshes them."""
        return retrying(
            lambda: self._run_once(make, write, snapshot, ready, transaction, touched), self.retry
        )

    def _run_once(
        self,
        make: Callable[[Tx], Program[T]],
        write: bool,
        snapshot: bool,
        ready: Mapping[bytes, Vector] | None,
        transaction: Transaction | None = None,
        touched: list[int] | None = None,
    ) -> T:
        self._check_writable(write)
        opened = transaction or (lambda: self._transaction(write, snapshot))
        rechosen, identity = False, self.plan.identity if self.plan is not None else None
        with self._serial():
            while True:
                tx = Tx(self._vectors(), ready or {})
                try:
                    result = run(self._in_transaction(make(tx), tx), opened)
                except EmbedderMismatchError:
                    if rechosen or self.plan is None or self.plan.identity == identity:
                        raise
                    # an automatic embedder took the model another process recorded: what was embedded
                    # ahead is the other model's
                    rechosen, ready = True, {}
                    continue
                if not tx.unembedded:
                    break
                # it stopped before writing: embed outside the transaction, run it again
                ready = {**tx.ready, **self._embed_texts(tx.unembedded)}
            self._after(tx, touched)
        return result

    def _after(self, tx: Tx, touched: list[int] | None) -> None:
        """What a committed program left to do: vector cache changes, TTL refreshes (sync; into
        ``touched`` when a read session refreshes them after it closes)."""
        if tx.changes:
            self._vectors_changed(tx)
        if touched is not None:
            touched.extend(tx.touched)
        else:
            self._refresh_ttl(tx.touched)

    def _refresh_ttl(self, touched: Iterable[int]) -> None:
        """Push back the expiry of the items read with ``refresh_ttl`` (a write transaction of its own)."""
        ids = sorted(set(touched))
        if ids and not self.read_only:
            self._run(lambda _: prog.refresh_program(self.dialect, ids, self.clock()), write=True)

    def _embed_texts(self, texts: Mapping[bytes, str]) -> dict[bytes, Vector]:
        """Vectors for ``texts`` (by text hash), checked against the index's dims."""
        if not texts:
            return {}
        assert self.plan is not None
        matrix = _embed(self.plan, list(texts.values()))
        _write.check_dims(self.plan, matrix)
        return dict(zip(texts, matrix, strict=True))

    # -------------------------------------------------- BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        write = any(isinstance(op, PutOp) for op in ops)
        self._check_writable(write)
        ready = self._embed_ahead(ops, self.search_mode)
        results: list[Result] = self._run(
            self._batch_program(ops),
            write=write,
            ready=ready,
        )
        return results

    def fenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]:
        """:meth:`batch`, not combined with other calls' ops, its transaction running ``fence`` first (a
        thread lease's check of its fencing token, :meth:`remem._lease.ThreadLease.fenced`): when it
        raises, the transaction rolls back and the batch writes nothing."""
        ops = list(ops)
        write = any(isinstance(op, PutOp) for op in ops)
        self._check_writable(write)
        ready = self._embed_ahead(ops, self.search_mode)
        results: list[Result] = self._run(self._batch_program(ops, fence), write=write, ready=ready)
        return results

    async def afenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]:
        """Async version of :meth:`fenced_batch`."""
        return await asyncio.to_thread(self.fenced_batch, list(ops), fence)

    shares_reads: bool = False
    """Whether :meth:`reading` runs its batches in one transaction (PostgreSQL: a round trip saved for each
    BEGIN and COMMIT, a pool's connection checked out once); elsewhere each batch runs alone."""

    def reading(self) -> contextlib.AbstractContextManager[Reads]:
        """A read session: the batches of reads given to the function it yields run one after another in
        one read transaction on one connection, opened by the first and committed at the end. Statements
        see what they would see in transactions of their own (READ COMMITTED: each statement sees what was
        committed before it began), so a flow that reads in several steps (a context card: the thread's
        metadata, its tail, its summary, a search, the hits' neighbours) pays one BEGIN and one COMMIT.
        A failed statement ends the transaction (rolled back); the next batch opens another (so a lost
        connection is retried as a batch of its own is); so does a search whose query is embedded, after
        the session commits what it read (the embedder may be a network round trip). Hold it only between
        reads: the caller closes it before a write, a lease or a model call, so that no connection waits
        idle in a transaction. TTL refreshes the reads ask for run after the session ends."""
        if not self.shares_reads:
            return contextlib.nullcontext(self.batch)
        return shared_reads(self)

    def _batch_program(
        self, ops: list[Op], fence: Fence | None = None
    ) -> Callable[[Tx], Program[list[Result]]]:
        """What the drivers run for one batch of ``ops`` (built again on a retry), ``fence`` first."""

        def program(tx: Tx) -> Program[list[Result]]:
            if fence is not None:
                yield from fence(self.dialect.name)
            return (
                yield from prog.batch_program(
                    self.dialect,
                    tx,
                    self.plan,
                    ops,
                    self.search_mode,
                    self.clock(),
                    omit_expired=self._omit_expired(),
                )
            )

        return program

    def _embed_ahead(self, ops: list[Op], mode: SearchMode) -> dict[bytes, Vector]:
        """Embed what ``ops`` will need before their transaction opens (see ``texts_to_embed_program``)."""
        plan = self.plan
        if plan is None:
            return {}
        texts: dict[bytes, str] = {}
        if any(isinstance(op, PutOp) for op in ops):  # puts: a look-up of what is stored already
            texts = self._run(
                lambda _: _write.texts_to_embed_program(self.dialect, plan, ops, mode),
                write=False,
                snapshot=False,
            )
        else:  # searches only: their queries, no database needed
            texts = self._query_texts(ops, mode)
        return self._embed_texts(texts)

    def _query_texts(self, ops: list[Op], mode: SearchMode) -> dict[bytes, str]:
        """What the searches of ``ops`` embed before they run (by text hash): nothing without an index
        or for a keyword search."""
        return query_texts(ops) if self.plan is not None and mode in ("hybrid", "vector") else {}

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # -------------------------------------------------- remem's additions

    def hybrid_search(
        self,
        namespace_prefix: tuple[str, ...],
        query: str,
        *,
        mode: SearchMode = "hybrid",
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[ScoredItem]:
        """Ranked items under ``namespace_prefix`` for ``query``: keyword, vector, or both fused (``_fusion``)."""
        op = self._search_op(namespace_prefix, query, filter, limit, offset, refresh_ttl)
        ready = self._embed_ahead([op], mode)
        return self._run(
            lambda tx: _search.search_program(self.dialect, tx, self.plan, op, mode, self.clock()),
            write=False,
            ready=ready,
        )

    async def ahybrid_search(
        self, namespace_prefix: tuple[str, ...], query: str, **kw: Any
    ) -> list[ScoredItem]:
        """Async version of :meth:`hybrid_search`."""
        return await asyncio.to_thread(self.hybrid_search, namespace_prefix, query, **kw)

    def _search_op(
        self,
        namespace_prefix: tuple[str, ...],
        query: str,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> SearchOp:
        return SearchOp(
            tuple(namespace_prefix),
            dict(filter) if filter else None,
            limit,
            offset,
            query,
            refresh_ttl if refresh_ttl is not None else self._refresh_default(),
        )

    _refresh_unset = True
    """What a read does to TTLs when a ``TTLConfig`` names no ``refresh_on_read``: refresh on PostgreSQL
    (as stock ``PostgresStore``), not on SQLite (as stock ``SqliteStore``); ``refresh_ttl=`` of a call wins."""

    @property
    def ttl_config(self) -> TTLConfig | None:
        return self._ttl_config

    @ttl_config.setter
    def ttl_config(self, ttl: TTLConfig | None) -> None:
        if ttl is not None and "refresh_on_read" not in ttl:
            ttl = {**ttl, "refresh_on_read": self._refresh_unset}
        self._ttl_config = ttl

    def _refresh_default(self) -> bool:
        return bool((self.ttl_config or {}).get("refresh_on_read", True))

    def _omit_expired(self) -> bool:
        """``TTLConfig["omit_expired"]``: reads leave out expired items no sweep has deleted yet (default
        False, as LangGraph's stores: they are seen until a sweep)."""
        return bool((self.ttl_config or {}).get("omit_expired", False))

    def delete_items(
        self,
        prefixes: Sequence[tuple[str, ...]] = (),
        *,
        keys: Sequence[tuple[tuple[str, ...], str]] = (),
        matching: Sequence[tuple[tuple[str, ...], Mapping[str, str]]] = (),
        compact: bool = False,
        then: Callable[[DeleteReport], Statements[Any]] | None = None,
    ) -> DeleteReport:
        """Delete, in one transaction, every item under ``prefixes``, the items ``keys`` names as
        (namespace, key), and every item under a prefix of ``matching`` whose value holds each of the
        given (key, text) pairs; with their vectors, keyword-index rows and cached embeddings, and the
        namespaces this leaves empty. ``compact=True`` then rewrites storage (VACUUM) so that the deleted
        bytes leave the files; :meth:`compact` does it checked, waiting for other readers.

        ``then(report)``: statements of a higher layer (:data:`~remem.store.Statements`, such as the erasure
        journal's) run in the same transaction after the delete, so that they commit together or not at all.
        Labels, keys and match keys are checked before any transaction (:func:`check_delete`).
        """
        _delete.check_delete(prefixes, keys, matching)
        return self._deleted(
            self._run(self._delete_program(prefixes, keys, matching, then), write=True), compact
        )

    def _deleted(self, done: tuple[DeleteReport, list[str]], compact: bool) -> DeleteReport:
        """After a delete committed: its values' cached embeddings dropped, storage compacted if asked."""
        report, values = done
        self._evict_texts(values)
        if compact:
            with self._lock:
                report.compacted = self._compact()
        return report

    def _delete_program(
        self,
        prefixes: Sequence[tuple[str, ...]],
        keys: Sequence[tuple[tuple[str, ...], str]],
        matching: Sequence[tuple[tuple[str, ...], Mapping[str, str]]],
        then: Callable[[DeleteReport], Statements[Any]] | None,
    ) -> Callable[[Tx], Program[tuple[DeleteReport, list[str]]]]:
        def program(tx: Tx) -> Program[tuple[DeleteReport, list[str]]]:
            report, values = yield from _delete.delete_program(self.dialect, tx, prefixes, keys, matching)
            if then is not None:
                yield from then(report)
            return report, values

        return program

    async def adelete_items(
        self,
        prefixes: Sequence[tuple[str, ...]] = (),
        *,
        keys: Sequence[tuple[tuple[str, ...], str]] = (),
        matching: Sequence[tuple[tuple[str, ...], Mapping[str, str]]] = (),
        compact: bool = False,
        then: Callable[[DeleteReport], Statements[Any]] | None = None,
    ) -> DeleteReport:
        """Async version of :meth:`delete_items`."""
        _delete.check_delete(prefixes, keys, matching)
        return await self._adelete(self._delete_program(prefixes, keys, matching, then), compact)

    async def _adelete(
        self, make: Callable[[Tx], Program[tuple[DeleteReport, list[str]]]], compact: bool
    ) -> DeleteReport:
        """How :meth:`adelete_items` runs: in a worker thread, unless the backend has an async driver."""
        return await asyncio.to_thread(lambda: self._deleted(self._run(make, write=True), compact))

    def run_statements(self, make: Callable[[str], Statements[T]]) -> T:
        """Run a higher layer's statements, ``make(backend)`` (``"sqlite"`` or ``"postgres"``), in one write
        transaction of this store: for tables kept in the store's database (the erasure journal, the usage
        ledger's rows an erasure deletes). The store may build them again to retry on a new connection."""
        return self._run(lambda _: make(self.dialect.name), write=True)

    def compact(self, *, wait: float = 30.0) -> Compaction:
        """Rewrite storage so that deleted rows' bytes leave the database's files, waiting up to ``wait``
        seconds for other connections that still need the old rows; says plainly when that was not done."""
        return _compact.compact(self, wait=wait)

    def _evict_texts(self, values: list[str]) -> None:
        evict = getattr(self.plan.embed, "evict", None) if self.plan else None
        if not callable(evict) or self.plan is None:
            return
        texts = [
            t for raw in values for _, t in core.texts_for(core.loads(raw), core.embedded(self.plan.fields))
        ]
        evict(texts)

    def _setup_now(self) -> None:
        """Create or migrate the tables (idempotent): the backend's ``setup``, sync or async."""
        raise NotImplementedError

    def _sweep_now(self) -> int:
        return self._run(lambda tx: _delete.sweep_program(self.dialect, tx, self.clock()), write=True)

    async def asweep_ttl(self) -> int:
        """Delete expired items now; returns how many."""
        return await asyncio.to_thread(self._sweep_now)

    def _sweep_interval(self, sweep_interval_minutes: float | None) -> float:
        return float(sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5)

    def _start_sweeper_thread(self, sweep_interval_minutes: float | None) -> threading.Thread:
        minutes = self._sweep_interval(sweep_interval_minutes)
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        self._sweeper_stop.clear()

        def loop() -> None:
            while not self._sweeper_stop.wait(minutes * 60):
                try:
                    self._sweep_now()
                except Exception:  # keep sweeping; the next round retries
                    logger.exception("TTL sweep failed; retrying at the next interval")

        self._sweeper = threading.Thread(target=loop, name="remem-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return self._sweeper

    def _stop_sweeper_thread(self, timeout: float | None) -> bool:
        self._sweeper_stop.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        self._sweeper = None if stopped else self._sweeper
        return stopped

    def reembed(
        self,
        index: IndexConfig | Mapping[str, Any] | None = None,
        *,
        batch_items: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Embed every stored vector again with ``index``'s embedder (default: the store's own) and record
        it as the store's: how to switch models (:mod:`remem.store._embedder`). A store whose record names
        another model refuses to open with an index, so open it without one and pass the new ``index``::

            with SqliteStore.from_conn_string("memory.db") as store:
                store.reembed({"dims": 384, "embed": CachedEmbedder(E5Embedder())})

        Items are done ``batch_items`` at a time, each page embedded outside a transaction and written in
        one; the first page's transaction rewrites the record, so writers and searches with the old model
        are refused from then on. Until it ends, the vectors not yet done are the old model's: searches
        rank them poorly (run it while the store is idle); run it again if it stopped (it redoes all).
        ``progress(done)`` is called after each page with the items done so far. Returns that count."""
        plan = IndexPlan.from_config(index) if index else self.plan
        if plan is None:
            raise ConfigError("reembed needs an embedder: pass index={'dims': ..., 'embed': ...}")
        self._check_writable(True)
        after, done, first = 0, 0, True
        while True:
            items = self._reembed_page(plan, after, batch_items, first)
            first = False
            if not items:
                return done
            after, done = max(items), done + len(items)
            if progress is not None:
                progress(done)

    def _reembed_page(self, plan: IndexPlan, after: int, batch_items: int, first: bool) -> set[int]:
        """Embed again the vectors of the next page of items after ``after`` and write them (on the first
        page, with the record rewritten, even where the store has no vector); returns the page's items."""
        page = self._run(
            lambda _: _embedder.reembed_page_program(self.dialect, after, batch_items), write=False
        )
        texts = _embedder.reembed_texts(page)
        wanted = {_rows.core_hash(t): t for *_, t in texts if t is not None}
        matrix = _embed(plan, list(wanted.values())) if wanted else np.zeros((0, plan.dims), np.float32)
        _write.check_dims(plan, matrix)
        vectors = dict(zip(wanted, matrix, strict=True))
        if texts or first:
            self._run(
                lambda tx: _embedder.reembed_write_program(self.dialect, tx, plan, texts, vectors, first),
                write=True,
            )
        return {item_id for item_id, *_ in texts}

    async def areembed(
        self,
        index: IndexConfig | Mapping[str, Any] | None = None,
        *,
        batch_items: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Async version of :meth:`reembed`."""
        return await asyncio.to_thread(self.reembed, index, batch_items=batch_items, progress=progress)

    def stats(self) -> dict[str, Any]:
        """Counts of items, namespaces, vectors and items per root label."""
        return self._run(lambda _: _delete.stats_program(self.dialect), write=False)


def check_read_only_schema(version: int, where: str) -> None:
    """Refuse to read a database whose store tables are missing or older than this remem's."""
    from remem.store._schema import COMPONENT

    if version == 0:
        raise NotFoundError(
            f"{where} has no remem store; check --db or REMEM_DATABASE_URL (a command that writes, "
            "such as remem chat, creates it)"
        )
    if version < COMPONENT.latest:
        raise StorageError(
            f"{where} holds remem's store tables at version {version}, this remem needs {COMPONENT.latest}; "
            "open it once for writing (setup()) to migrate it"
        )


def query_texts(ops: Iterable[Op]) -> dict[bytes, str]:
    """The search queries of ``ops`` by text hash: what a search embeds."""
    return {_rows.core_hash(op.query): op.query for op in ops if isinstance(op, SearchOp) and op.query}


def _embed(plan: IndexPlan, texts: list[str]) -> npt.NDArray[np.float32]:
    """Vectors for ``texts``: normalised for cosine (the same scores, a faster search); as the embedder gives
    them for the inner product and L2, whose scores depend on their lengths (as on LangGraph's stores)."""
    if plan.distance == "cosine":
        return embed_array(plan.embed, texts)
    try:
        embed = plan.embed
        raw = embed.embed_documents(list(texts)) if hasattr(embed, "embed_documents") else embed(list(texts))
    except Exception as exc:  # a model failure, whatever its type
        raise ModelError(f"the embedder failed on {len(texts)} text(s): {exc}; check the model") from exc
    return np.asarray(raw, dtype=np.float32).reshape(len(texts), -1)


class SyncStore(RememStoreBase):
    """The lifecycle methods of a sync store, as LangGraph's sync stores spell them."""

    def setup(self) -> None:
        """Create or migrate the tables (idempotent; safe from several processes at once)."""
        self._setup_now()

    def sweep_ttl(self) -> int:
        """Delete expired items now; returns how many."""
        return self._sweep_now()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Thread:
        """Sweep expired items every ``sweep_interval_minutes`` (default: the TTL config's, else 5) in a thread."""
        return self._start_sweeper_thread(sweep_interval_minutes)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True if it stopped."""
        return self._stop_sweeper_thread(timeout)
