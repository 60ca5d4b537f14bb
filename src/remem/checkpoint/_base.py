"""What remem's sync and async savers share, written once: the serializer, the caches, the thread's
lease, the setup and stats operations and the statistics types (backends only open transactions and
run statements).

:class:`~remem.checkpoint._sync.SyncSaver` and :class:`~remem.checkpoint._async.AsyncSaver` turn each
operation (of ``_write``, ``_read`` and ``_prune``) into calls of a backend's ``_transaction`` (a context
manager giving an ``execute(query) -> rows`` function). They add the other flavour's methods too: a sync
saver's ``a*`` methods run in a worker thread, an async saver's sync methods run on its event loop from
another thread (as the stock async savers do).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from remem import _migrate
from remem._lease import (
    DEFAULT_LEASE_TIMEOUT,
    LeaseTarget,
    ThreadLease,
    atake_lease,
    athread_lease,
    carried_lease,
    take_lease,
    thread_lease,
    write_lease,
)
from remem._statements import Program
from remem.checkpoint import _codec as codec
from remem.checkpoint import _delta, _prune, _read, _write
from remem.checkpoint import _ops as ops
from remem.checkpoint import _sql as sql
from remem.checkpoint._cache import SaverCache
from remem.checkpoint._claims import Claim
from remem.checkpoint._serde import RememSerializer
from remem.errors import (
    ArgumentTypeError,
    ConfigError,
    NotFoundError,
    RememError,
    RememUsageError,
    StorageError,
    ThreadBusyError,
)

__all__ = ["CheckpointStats", "RememSaver", "ThreadStats"]

T = TypeVar("T")
PRUNE_STRATEGIES = ("keep_latest", "delete")
_PAGE = 100
HEAD_READ = "checkpoint-head"  # the key of the latest read kept in a lease's scratch


@dataclass(frozen=True)
class ThreadStats:
    """What one thread holds: checkpoints, pending writes, distinct stored values, and their bytes."""

    thread_id: str
    checkpoints: int
    writes: int
    items: int
    lists: int
    bytes: int
    updated_at: datetime


@dataclass(frozen=True)
class CheckpointStats:
    """Per-thread stats, newest first, and the bytes the saver's tables take in the database."""

    threads: list[ThreadStats]
    storage_bytes: int

    @property
    def checkpoints(self) -> int:
        return sum(t.checkpoints for t in self.threads)


def setup_op(ctx: ops.Context, read_only: bool, where: str) -> Program[None]:
    dialect = ctx.dialect.name
    if not read_only:
        yield from _migrate.upgrade(sql.SCHEMA, dialect)
        return
    version = yield from _migrate.check(sql.SCHEMA, dialect)
    if version == 0:
        stock = yield _migrate.table_exists(dialect, sql.STOCK_TABLES[0])
        if stock:
            raise NotFoundError(
                f"{where} holds checkpoints of LangGraph's stock saver, not remem's; copy them into "
                "remem's tables with `remem import URL` (the same URL; see remem import --help)"
            )
        raise NotFoundError(
            f"{where} has no remem checkpoints; check --db or REMEM_DATABASE_URL "
            "(a command that writes, such as remem chat, creates them)"
        )
    if version < sql.SCHEMA.latest:
        raise StorageError(
            f"{where} holds remem's checkpoint tables at version {version}, this remem needs "
            f"{sql.SCHEMA.latest}; open it once for writing (setup()) to migrate it"
        )


def schema_current(ctx: ops.Context) -> Program[bool]:
    """Read-only: the tables are at this remem's version, so a writer's ``setup()`` has nothing to do and
    need not wait for another writer's lock (as the stock savers' setup does not)."""
    version = yield from _migrate.check(sql.SCHEMA, ctx.dialect.name)
    return version == sql.SCHEMA.latest


def read_only_error(where: str) -> ConfigError:
    return ConfigError(f"this saver opened {where} read-only; open it without read_only=True to write")


def stats_op(ctx: ops.Context) -> Program[CheckpointStats]:
    threads_q, *per_table = ctx.dialect.stats()
    threads = yield ctx.q(threads_q)
    counts: list[dict[int, tuple[int, int]]] = []
    for text in per_table:
        counts.append({r[0]: (int(r[1]), int(r[2])) for r in (yield ctx.q(text))})
    if ctx.dialect.name == "sqlite":
        ((pages,),) = yield ctx.q("PRAGMA page_count")
        ((page_size,),) = yield ctx.q("PRAGMA page_size")
        size = int(pages) * int(page_size)
    else:
        names = ctx.dialect.list_param([*sql.TABLES, "remem_cp_threads"])
        ((size,),) = yield ctx.q(
            f"SELECT COALESCE(SUM(pg_total_relation_size(oid)), 0) FROM pg_class WHERE {ctx.dialect.in_list('relname')}"
            " AND relkind = 'r'",
            (names,),
        )
    out = []
    for tid, thread_id, _created, updated in threads:
        c, w, li, it = (table.get(tid, (0, 0)) for table in counts)
        out.append(
            ThreadStats(
                thread_id=thread_id,
                checkpoints=c[0],
                writes=w[0],
                items=it[0],
                lists=li[0],
                bytes=c[1] + w[1] + li[1] + it[1],
                updated_at=datetime.fromtimestamp(float(updated), tz=UTC),
            )
        )
    out.sort(key=lambda s: s.updated_at, reverse=True)
    return CheckpointStats(out, int(size or 0))


def _check_claim(thread_id: str, checkpoint_id: str, head: str | None) -> None:
    if head != checkpoint_id:
        raise ThreadBusyError(
            f"thread {thread_id!r} moved on while this run was under way: another run wrote checkpoint "
            f"{head} after this run read the thread, so this run stopped before its model call (the model "
            "was not called, this step wrote nothing). Send turns one at a time per thread with "
            "remem.run_turn (a second turn then waits for the thread's lease), or retry"
        )


@contextlib.contextmanager
def _given_back(lease: ThreadLease) -> Iterator[ThreadLease]:
    """A claimed lease (:mod:`._claims`) for one put, released after it."""
    try:
        yield lease
    finally:
        lease.release()


def head_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def cutoff_of(older_than: timedelta | datetime | None) -> datetime | None:
    if older_than is None:
        return None
    if isinstance(older_than, datetime):
        return older_than if older_than.tzinfo is not None else older_than.replace(tzinfo=UTC)
    return datetime.now(UTC) - older_than


class RememSaver(BaseCheckpointSaver[int]):
    """What the sync and async savers share: serializer, caches, versions."""

    _dialect: sql.Dialect

    def __init__(
        self,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Collection[type | tuple[str, ...]] = (),
        read_only: bool = False,
    ) -> None:
        trusted = serde is not None
        if serde is None:
            # No pickle; msgpack revives LangGraph's safe types, imported data classes and allowed_types.
            serde = RememSerializer(allowed_types)
        super().__init__(serde=serde)
        self._ctx = ops.Context(self._dialect, self.serde, SaverCache(), trusted_types=trusted)
        self._is_setup = False
        self.read_only = read_only
        """``setup()`` checks the tables instead of creating them (the database refuses writes too)."""
        self._where = "the database"
        """How messages name the database (never with a password)."""
        self._lease_target: LeaseTarget | None = None
        self._listings = _delta.Listings()

    @property
    def serde(self) -> SerializerProtocol:
        return self.__dict__["_serde"]  # type: ignore[no-any-return]

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        """A serializer set after construction (``saver.serde = EncryptedSerializer(...)``, as LangGraph's
        own suites do) is the one every later write and read uses, as on the stock savers."""
        self.__dict__["_serde"] = value
        ctx = self.__dict__.get("_ctx")
        if ctx is not None and ctx.serde is not value:
            self._ctx = dataclasses.replace(ctx, serde=value, trusted_types=True, _names={})

    @property
    def lease_target(self) -> LeaseTarget:
        """Where this saver's thread leases are held: its own database, found from the connection it holds
        (once; a saver keeps its connection)."""
        if self._lease_target is None:
            self._lease_target = self._find_lease_target()
        return self._lease_target

    def _find_lease_target(self) -> LeaseTarget:
        return LeaseTarget.in_process(self)

    async def alease_target(self) -> LeaseTarget:
        """Async version of :attr:`lease_target` (an ``aiosqlite`` connection is asked from async code)."""
        return self.lease_target

    def _scratch(self, config: RunnableConfig) -> dict[Any, Any] | None:
        """Where a turn that holds the thread's lease keeps the latest checkpoint it read.

        ``run_turn`` reads the thread (to check the input) and then LangGraph reads it again to run the
        turn: on a long thread decoding every message twice. Under the lease the second read only checks
        that the head is unchanged (its id, the thread's epoch, its pending write count) and returns the
        first read's values in new containers. Only latest reads of the root namespace are kept.
        """
        conf = config["configurable"]
        if conf.get("checkpoint_id") or conf.get("checkpoint_ns"):
            return None
        lease = self._turn_lease(config)
        return lease.scratch if lease is not None else None

    @contextlib.contextmanager
    def _putting(self, config: RunnableConfig, written: str) -> Iterator[None]:
        """Around a put of the checkpoint ``written`` to ``config``'s thread, from before its first
        statement to after its commit or failure: what was read of the thread is dropped, and a history
        read running meanwhile keeps nothing it may have read from the rows the put replaces
        (:meth:`~._cache.SaverCache.begin_put`)."""
        conf = config["configurable"]
        key = (str(conf.get("thread_id")), str(conf.get("checkpoint_ns", "")), written)
        self._forget_read(config)
        self._ctx.cache.begin_put(*key)
        try:
            yield
        finally:
            self._ctx.cache.end_put(*key)

    def _forget_read(self, config: RunnableConfig) -> None:
        """Before a write to ``config``'s thread (a put, :meth:`_putting`, or pending writes)."""
        conf = config["configurable"]
        self._listings.forget(str(conf.get("thread_id")))
        lease = self._turn_lease(config)
        if lease is not None:
            lease.scratch.pop(HEAD_READ, None)

    def _turn_lease(self, config: RunnableConfig) -> ThreadLease | None:
        """The lease of the turn this call belongs to: what ``config`` carries under
        :data:`remem._lease.TURN_LEASE_KEY` (:func:`remem.run_turn` puts it there), if it is this thread's
        in this saver's database; None for a call outside a turn."""
        return carried_lease(config, self.lease_target, scope="checkpoint")

    def _run_lease(
        self, config: RunnableConfig, in_transaction: bool = False
    ) -> contextlib.AbstractContextManager[ThreadLease | None]:
        """The lease a checkpoint is written under: the turn's (carried by ``config``), else, for a run that
        started from the thread's head, the thread's lease taken for this write (``in_transaction``: by the
        write's own transaction where the database can, :func:`remem._lease.write_lease`).

        Such a checkpoint must extend the head (``_write.put`` refuses it otherwise, with
        :class:`~remem.errors.ThreadBusyError`); holding the lease while it is written makes it wait for a
        turn that holds the lease (:func:`remem.run_turn`) to finish, so that turn is never cut short by
        a bare ``invoke``. The write is made after the lease is verified (:meth:`ThreadLease.verify`).
        """
        held = self._turn_lease(config)
        conf = config["configurable"]
        if held is not None or not _write.from_head(conf):
            return contextlib.nullcontext(held)
        claimed = self._ctx.claims.take(self.lease_target, str(conf["thread_id"]), conf.get("checkpoint_id"))
        if claimed is not None:
            return _given_back(claimed)
        if in_transaction and (
            folded := write_lease(self.lease_target, str(conf["thread_id"]), scope="checkpoint")
        ):
            return _given_back(folded)
        return thread_lease(self.lease_target, str(conf["thread_id"]), scope="checkpoint", single_write=True)

    def _arun_lease(
        self, config: RunnableConfig, in_transaction: bool = False
    ) -> contextlib.AbstractAsyncContextManager[ThreadLease | None]:
        """Async version of :meth:`_run_lease`."""
        held = self._turn_lease(config)
        conf = config["configurable"]
        if held is not None or not _write.from_head(conf):
            return contextlib.nullcontext(held)
        return self._aclaimed_or_lease(str(conf["thread_id"]), conf.get("checkpoint_id"), in_transaction)

    @contextlib.asynccontextmanager
    async def _aclaimed_or_lease(
        self, thread_id: str, parent_id: str | None, in_transaction: bool
    ) -> AsyncIterator[ThreadLease]:
        claimed = self._ctx.claims.take(await self.alease_target(), thread_id, parent_id)
        if claimed is None and in_transaction:
            claimed = write_lease(await self.alease_target(), thread_id, scope="checkpoint")
        if claimed is None:
            target = await self.alease_target()
            async with athread_lease(target, thread_id, scope="checkpoint", single_write=True) as lease:
                yield lease
            return
        try:
            yield claimed
        finally:
            if claimed.in_transaction:
                claimed.release()  # nothing to give back to the database
            else:
                await asyncio.to_thread(claimed.release)

    def _claim_spot(self, config: RunnableConfig) -> tuple[str, str, str] | None:
        """(run, thread id, the checkpoint a model call runs from) when that call can claim the thread: a
        bare run's call (no turn lease) in the root graph, whose checkpoints are written as it goes."""
        conf = config.get("configurable") or {}
        run, checkpoint_id = conf.get(ops.RUN_MARK), (conf.get("checkpoint_map") or {}).get("")
        if not run or not checkpoint_id or self._turn_lease(config) is not None:
            return None
        if "|" in str(conf.get("checkpoint_ns", "")) or conf.get("__pregel_durability") == "exit":
            return None
        return str(run), str(conf["thread_id"]), str(checkpoint_id)

    def claim_model_call(self, config: RunnableConfig) -> Claim | None:
        """Claim the thread for the model call of the task ``config`` belongs to (see :mod:`._claims`):
        its lease, held until the checkpoint after the call is written (the :class:`~._claims.Claim` gives it
        back when no put takes it); None when the call cannot claim
        (a turn holds the lease already, time travel, a subgraph, ``durability="exit"``). Raises
        :class:`~remem.errors.ThreadBusyError` when the run was overtaken: the call must not be made."""
        spot = self._claim_spot(config)
        if spot is None:
            return None
        run, thread_id, checkpoint_id = spot
        self._wait_written(run, checkpoint_id)
        lease = take_lease(self.lease_target, thread_id, scope="checkpoint")
        try:
            _check_claim(thread_id, checkpoint_id, self._head_id(thread_id))
            return self._ctx.claims.hand_over(thread_id, checkpoint_id, lease)
        except BaseException:
            lease.release()
            raise

    async def aclaim_model_call(self, config: RunnableConfig) -> Claim | None:
        """Async version of :meth:`claim_model_call`."""
        await self.alease_target()
        spot = self._claim_spot(config)
        if spot is None:
            return None
        run, thread_id, checkpoint_id = spot
        await asyncio.to_thread(self._wait_written, run, checkpoint_id)
        lease = await atake_lease(await self.alease_target(), thread_id, scope="checkpoint")
        try:
            _check_claim(thread_id, checkpoint_id, await self._ahead_id(thread_id))
            return self._ctx.claims.hand_over(thread_id, checkpoint_id, lease)
        except BaseException:
            await asyncio.to_thread(lease.release)
            raise

    def wait_written(self, config: RunnableConfig) -> None:
        """Wait until the checkpoint the task of ``config`` runs from is written, for a task of a run that
        claims its model calls (else at once); raises what refused it."""
        spot = self._claim_spot(config)
        if spot is not None:
            self._wait_written(spot[0], spot[2])

    def _wait_written(self, run: str, checkpoint_id: str) -> None:
        # A put waits at most the lease timeout for the lease, then fails: its outcome comes by then.
        if not self._ctx.claims.wait_written(run, checkpoint_id, 2 * DEFAULT_LEASE_TIMEOUT):
            raise ThreadBusyError(
                f"this run's checkpoint {checkpoint_id} was not written within {2 * DEFAULT_LEASE_TIMEOUT:g} s "
                "(the thread's lease stayed taken); the model was not called. Retry when the thread is free"
            )

    def _writes_follow(self, run: str, checkpoint_id: str) -> bool | None:
        """After a run's pending writes found their checkpoint not stored, whether they may be written:
        the run's put of that checkpoint can still be under way (LangGraph saves a checkpoint and the
        writes on it in parallel), so this waits for it. True: it was written (write, again only if it is
        still stored: an erasure may have removed it); False: one of the run's checkpoints was refused
        (nothing of the run follows, so nothing is written); None: no outcome came in time (written as
        stock writes it)."""
        try:
            written = self._ctx.claims.wait_written(run, checkpoint_id, 2 * DEFAULT_LEASE_TIMEOUT)
        except RememError:
            return False
        return True if written else None

    def _head_id(self, thread_id: str) -> str | None:
        raise NotImplementedError

    async def _ahead_id(self, thread_id: str) -> str | None:
        raise NotImplementedError

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The base class's result, read as stored in one transaction (:func:`._delta.history`: a page of
        ancestors per statement, back to the checkpoint of the last history read when nothing it was read
        from changed), or from the listing a tuple came from (``get_state_history``). It stops at a
        checkpoint seen before (a re-put that made the parent chain a cycle would loop forever in the base
        class's walk)."""
        listed = self._listings.history(config, channels)
        if listed is not None:
            return listed
        if not channels:
            return {}
        if not config["configurable"].get("checkpoint_id"):
            latest = self.get_tuple(config)
            if latest is None:
                return {ch: {"writes": []} for ch in channels}
            config = latest.config
        return self._read_history(config, channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        listed = self._listings.history(config, channels)
        if listed is not None:
            return listed
        if not channels:
            return {}
        if not config["configurable"].get("checkpoint_id"):
            latest = await self.aget_tuple(config)
            if latest is None:
                return {ch: {"writes": []} for ch in channels}
            config = latest.config
        return await self._aread_history(config, channels)

    def _read_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        raise NotImplementedError

    async def _aread_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        raise NotImplementedError

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return codec.next_version(current)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> BaseCheckpointSaver[int]:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self and isinstance(clone, RememSaver):
            clone._ctx = dataclasses.replace(self._ctx, serde=clone.serde)
        return clone

    def _page(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        cursor: _read.Cursor | None,
        shared: _delta.Shared,
        tx: ops.Tx,
        sized: frozenset[str] = frozenset(),
        lengths: dict[str, dict[str, int]] | None = None,
    ) -> Program[tuple[builtins.list[CheckpointTuple], _read.Cursor | None]]:
        page = yield from _read.list_page(
            self._ctx,
            config,
            filter=filter,
            before=before,
            cursor=cursor,
            page_size=_PAGE,
            shared=shared,
            sized=sized,
            lengths=lengths,
        )
        # A sized listing's tuples lack values: no history is read from them.
        if not sized and _delta.replayed(page[0]):
            return self._listings.add(shared, page[0]), page[1]
        return page

    def _idle(self, ids: Sequence[str], cutoff: datetime, tx: ops.Tx) -> Program[builtins.list[str]]:
        return _prune.idle_threads(self._ctx, ids, cutoff)

    def _prune_one(self, thread_id: str, pick: _prune.Picker, tx: ops.Tx) -> Program[int]:
        return _prune.prune_thread(self._ctx, tx, thread_id, pick)

    def _check_prune(self, thread_ids: Sequence[str], strategy: str) -> list[str]:
        self._listings.forget()  # what was listed may be pruned
        if isinstance(thread_ids, str):
            raise ArgumentTypeError("thread_ids must be a sequence of thread ids, not one str")
        if strategy not in PRUNE_STRATEGIES:
            raise RememUsageError(
                f"unknown prune strategy {strategy!r}; use one of {', '.join(PRUNE_STRATEGIES)}"
            )
        return [str(t) for t in thread_ids]
