"""The public API of remem's savers, written once; backends only open transactions and run statements.

:class:`SyncSaver` and :class:`AsyncSaver` turn each operation (of ``_write``, ``_read`` and ``_prune``)
into calls of a backend's ``_transaction`` (a context manager giving an ``execute(query) -> rows``
function). They add the other flavour's methods too: a sync saver's ``a*`` methods run in a worker
thread, an async saver's sync methods run on its event loop from another thread (as the stock async
savers do).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from remem import _migrate
from remem._lease import ThreadLease, athread_lease, carried_lease, lease_target, thread_lease
from remem._statements import AExecute, Execute, Program, arun, run
from remem.checkpoint import _codec as codec
from remem.checkpoint import _ops as ops
from remem.checkpoint import _prune, _read, _write
from remem.checkpoint import _sql as sql
from remem.checkpoint._cache import SaverCache
from remem.checkpoint._serde import RememSerializer
from remem.errors import ArgumentTypeError, ConfigError, NotFoundError, RememUsageError, StorageError

__all__ = ["AsyncSaver", "CheckpointStats", "SyncSaver", "ThreadStats"]

T = TypeVar("T")
PRUNE_STRATEGIES = ("keep_latest", "delete")
_PAGE = 100
_HEAD_READ = "checkpoint-head"  # the key of the latest read kept in a lease's scratch


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


def _setup_op(ctx: ops.Context, read_only: bool, where: str) -> Program[None]:
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


def _read_only_error(where: str) -> ConfigError:
    return ConfigError(f"this saver opened {where} read-only; open it without read_only=True to write")


def _stats_op(ctx: ops.Context) -> Program[CheckpointStats]:
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


def _cutoff(older_than: timedelta | datetime | None) -> datetime | None:
    if older_than is None:
        return None
    if isinstance(older_than, datetime):
        return older_than if older_than.tzinfo is not None else older_than.replace(tzinfo=UTC)
    return datetime.now(UTC) - older_than


class _RememSaver(BaseCheckpointSaver[int]):
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

    def _forget_read(self, config: RunnableConfig) -> None:
        lease = self._turn_lease(config)
        if lease is not None:
            lease.scratch.pop(_HEAD_READ, None)

    def _turn_lease(self, config: RunnableConfig) -> ThreadLease | None:
        """The lease of the turn this call belongs to: what ``config`` carries under
        :data:`remem._lease.TURN_LEASE_KEY` (:func:`remem.run_turn` puts it there), if it is this thread's
        in this saver's database; None for a call outside a turn."""
        return carried_lease(config, lease_target(self), scope="checkpoint")

    def _run_lease(self, config: RunnableConfig) -> contextlib.AbstractContextManager[ThreadLease | None]:
        """The lease a checkpoint is written under: the turn's (carried by ``config``), else, for a run that
        started from the thread's head, the thread's lease taken for this write.

        Such a checkpoint must extend the head (``_write.put`` refuses it otherwise, with
        :class:`~remem.errors.ThreadBusyError`); holding the lease while it is written makes it wait for a
        turn that holds the lease (:func:`remem.run_turn`) to finish, so that turn is never cut short by
        a bare ``invoke``. The write is made after the lease is verified (:meth:`ThreadLease.verify`).
        """
        held = self._turn_lease(config)
        conf = config["configurable"]
        if held is not None or not _write.from_head(conf):
            return contextlib.nullcontext(held)
        return thread_lease(self, str(conf["thread_id"]), scope="checkpoint")

    def _arun_lease(
        self, config: RunnableConfig
    ) -> contextlib.AbstractAsyncContextManager[ThreadLease | None]:
        """Async version of :meth:`_run_lease`."""
        held = self._turn_lease(config)
        conf = config["configurable"]
        if held is not None or not _write.from_head(conf):
            return contextlib.nullcontext(held)
        return athread_lease(self, str(conf["thread_id"]), scope="checkpoint")

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return codec.next_version(current)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> BaseCheckpointSaver[int]:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self and isinstance(clone, _RememSaver):
            clone._ctx = dataclasses.replace(self._ctx, serde=clone.serde)
        return clone

    def _page(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        cursor: _read.Cursor | None,
        shared: dict[int, dict[int, Any]],
        tx: ops.Tx,
        sized: frozenset[str] = frozenset(),
        lengths: dict[str, dict[str, int]] | None = None,
    ) -> Program[tuple[builtins.list[CheckpointTuple], _read.Cursor | None]]:
        return _read.list_page(
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

    def _idle(self, ids: Sequence[str], cutoff: datetime, tx: ops.Tx) -> Program[builtins.list[str]]:
        return _prune.idle_threads(self._ctx, ids, cutoff)

    def _prune_one(self, thread_id: str, pick: _prune.Picker, tx: ops.Tx) -> Program[int]:
        return _prune.prune_thread(self._ctx, tx, thread_id, pick)

    @staticmethod
    def _check_prune(thread_ids: Sequence[str], strategy: str) -> list[str]:
        if isinstance(thread_ids, str):
            raise ArgumentTypeError("thread_ids must be a sequence of thread ids, not one str")
        if strategy not in PRUNE_STRATEGIES:
            raise RememUsageError(
                f"unknown prune strategy {strategy!r}; use one of {', '.join(PRUNE_STRATEGIES)}"
            )
        return [str(t) for t in thread_ids]


class SyncSaver(_RememSaver):
    """A remem saver over a blocking driver; subclasses implement :meth:`_transaction`."""

    def _transaction(self, write: bool) -> contextlib.AbstractContextManager[Execute]:
        raise NotImplementedError

    def _run(self, make: Callable[[ops.Tx], Program[T]], *, write: bool, setup: bool = True) -> T:
        if write and self.read_only:
            raise _read_only_error(self._where)
        if setup and not self._is_setup:
            self.setup()
        tx = ops.Tx()
        result = run(make(tx), lambda: self._transaction(write))
        for hook in tx.after_commit:
            hook()
        return result

    def setup(self) -> None:
        """Create or migrate the tables; idempotent and safe to run from many processes at once.

        A read-only saver checks them instead and raises :class:`~remem.errors.NotFoundError` when they are
        missing. A database written by a newer remem raises :class:`~remem.errors.SchemaTooNewError`.
        """
        self._run(
            lambda tx: _setup_op(self._ctx, self.read_only, self._where),
            write=not self.read_only,
            setup=False,
        )
        self._is_setup = True

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        scratch = self._scratch(config)
        if scratch is None:
            return _read.mark_loaded(
                config, self._run(lambda tx: _read.get_tuple(self._ctx, config), write=False)
            )
        kept = scratch.get(_HEAD_READ)
        if (
            kept is not None
            and self._run(lambda tx: _read.head_stamp(self._ctx, config), write=False) == kept[0]
        ):
            return _read.mark_loaded(config, _read.fresh_copy(kept[1]))
        stamp, tup = self._run(lambda tx: _read.get_head(self._ctx, config), write=False)
        if tup is not None:
            scratch[_HEAD_READ] = (stamp, tup)
            tup = _read.fresh_copy(tup)
        return _read.mark_loaded(config, tup)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first. Tuples listed in one call share the objects of values they have in common."""
        yield from self._list(config, filter, before, limit, frozenset(), None)

    def list_sized(
        self, config: RunnableConfig, *, sized: Collection[str], limit: int | None = None
    ) -> Iterator[tuple[CheckpointTuple, dict[str, int]]]:
        """Checkpoints newest first, as :meth:`list`, but the list value of each channel in ``sized`` is not read.

        The tuple holds an empty list in its place and the dict beside it the list's length, so listing a
        long thread's checkpoints (``remem history``) reads none of its messages. Pending writes to those
        channels keep their task and channel, with an empty list for the value.
        """
        lengths: dict[str, dict[str, int]] = {}
        for tup in self._list(config, None, None, limit, frozenset(sized), lengths):
            yield tup, lengths.pop(tup.config["configurable"]["checkpoint_id"], {})

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        sized: frozenset[str],
        lengths: dict[str, dict[str, int]] | None,
    ) -> Iterator[CheckpointTuple]:
        shared: dict[int, dict[int, Any]] = {}
        cursor: _read.Cursor | None = None
        remaining = limit
        while remaining is None or remaining > 0:
            page, cursor = self._run(
                functools.partial(
                    self._page, config, filter, before, cursor, shared, sized=sized, lengths=lengths
                ),
                write=False,
            )
            yield from page[:remaining]
            if remaining is not None:
                remaining -= min(remaining, len(page))
            if cursor is None:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self._run_lease(config) as lease:
            if lease is not None:
                lease.verify()
            self._forget_read(config)
            return self._run(
                lambda tx: _write.put(self._ctx, tx, config, checkpoint, metadata, new_versions), write=True
            )

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        lease = self._turn_lease(config)
        if lease is not None:
            lease.verify()
        self._forget_read(config)
        self._run(lambda tx: _write.put_writes(self._ctx, tx, config, writes, task_id, task_path), write=True)

    def delete_thread(self, thread_id: str) -> None:
        self._run(lambda tx: _prune.delete_threads(self._ctx, tx, [str(thread_id)]), write=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread_id in self._run(lambda tx: _prune.threads_of_runs(self._ctx, sorted(wanted)), write=False):
            self._run(functools.partial(self._prune_one, thread_id, _prune.of_runs(wanted)), write=True)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(
            lambda tx: _prune.copy_thread(self._ctx, str(source_thread_id), str(target_thread_id)), write=True
        )

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> None:
        """Prune threads: ``"keep_latest"`` keeps each namespace's latest checkpoint, ``"delete"`` deletes the threads.

        With ``older_than`` (an age or a moment), ``keep_latest`` deletes only checkpoints created before it
        and ``delete`` deletes only threads with no activity since. Values no remaining checkpoint or
        write uses are deleted with them.
        """
        self.prune_threads(thread_ids, strategy=strategy, older_than=older_than)

    def prune_threads(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> int:
        """:meth:`prune`, returning how many checkpoints (``keep_latest``) or threads (``delete``) went."""
        ids = self._check_prune(thread_ids, strategy)
        cutoff = _cutoff(older_than)
        if strategy == "delete":
            if cutoff is not None:
                ids = self._run(functools.partial(self._idle, ids, cutoff), write=False)
            self._run(lambda tx: _prune.delete_threads(self._ctx, tx, ids), write=True)
            return len(ids)
        pick = _prune.keep_latest(cutoff)
        return sum(self._run(functools.partial(self._prune_one, t, pick), write=True) for t in ids)

    def list_threads(self) -> builtins.list[str]:
        """Thread ids with at least one checkpoint, most recently written first."""
        return self._run(lambda tx: _read.list_threads(self._ctx), write=False)

    def stats(self) -> CheckpointStats:
        """Checkpoints, writes, stored values and bytes per thread, and the tables' size on disk."""
        return self._run(lambda tx: _stats_op(self._ctx), write=False)

    # The async API of a sync saver runs the sync methods in a worker thread.

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy, older_than=older_than))


class AsyncSaver(_RememSaver):
    """A remem saver over an asyncio driver; subclasses implement :meth:`_transaction`."""

    loop: asyncio.AbstractEventLoop

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._setup_lock = asyncio.Lock()
        self.loop = asyncio.get_running_loop()

    def _transaction(self, write: bool) -> contextlib.AbstractAsyncContextManager[AExecute]:
        raise NotImplementedError

    async def _run(self, make: Callable[[ops.Tx], Program[T]], *, write: bool, setup: bool = True) -> T:
        """Async version of :meth:`SyncSaver._run`."""
        if write and self.read_only:
            raise _read_only_error(self._where)
        if setup and not self._is_setup:
            await self.setup()
        tx = ops.Tx()
        result = await arun(make(tx), lambda: self._transaction(write))
        for hook in tx.after_commit:
            hook()
        return result

    async def setup(self) -> None:
        """Async version of :meth:`SyncSaver.setup`."""
        async with self._setup_lock:
            if not self._is_setup:
                await self._run(
                    lambda tx: _setup_op(self._ctx, self.read_only, self._where),
                    write=not self.read_only,
                    setup=False,
                )
                self._is_setup = True

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        scratch = self._scratch(config)
        if scratch is None:
            found = await self._run(lambda tx: _read.get_tuple(self._ctx, config), write=False)
            return _read.mark_loaded(config, found)
        kept = scratch.get(_HEAD_READ)
        if (
            kept is not None
            and await self._run(lambda tx: _read.head_stamp(self._ctx, config), write=False) == kept[0]
        ):
            return _read.mark_loaded(config, _read.fresh_copy(kept[1]))
        stamp, tup = await self._run(lambda tx: _read.get_head(self._ctx, config), write=False)
        if tup is not None:
            scratch[_HEAD_READ] = (stamp, tup)
            tup = _read.fresh_copy(tup)
        return _read.mark_loaded(config, tup)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async version of :meth:`SyncSaver.list`."""
        async for tup in self._alist(config, filter, before, limit, frozenset(), None):
            yield tup

    async def alist_sized(
        self, config: RunnableConfig, *, sized: Collection[str], limit: int | None = None
    ) -> AsyncIterator[tuple[CheckpointTuple, dict[str, int]]]:
        """Async version of :meth:`SyncSaver.list_sized`."""
        lengths: dict[str, dict[str, int]] = {}
        async for tup in self._alist(config, None, None, limit, frozenset(sized), lengths):
            yield tup, lengths.pop(tup.config["configurable"]["checkpoint_id"], {})

    def list_sized(
        self, config: RunnableConfig, *, sized: Collection[str], limit: int | None = None
    ) -> Iterator[tuple[CheckpointTuple, dict[str, int]]]:
        """See :meth:`SyncSaver.list_sized`."""

        async def collect() -> builtins.list[tuple[CheckpointTuple, dict[str, int]]]:
            return [t async for t in self.alist_sized(config, sized=sized, limit=limit)]

        yield from self._sync(collect())

    async def _alist(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        sized: frozenset[str],
        lengths: dict[str, dict[str, int]] | None,
    ) -> AsyncIterator[CheckpointTuple]:
        shared: dict[int, dict[int, Any]] = {}
        cursor: _read.Cursor | None = None
        remaining = limit
        while remaining is None or remaining > 0:
            page, cursor = await self._run(
                functools.partial(
                    self._page, config, filter, before, cursor, shared, sized=sized, lengths=lengths
                ),
                write=False,
            )
            for tup in page[:remaining]:
                yield tup
            if remaining is not None:
                remaining -= min(remaining, len(page))
            if cursor is None:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        async with self._arun_lease(config) as lease:
            if lease is not None:
                await lease.averify()
            self._forget_read(config)
            return await self._run(
                lambda tx: _write.put(self._ctx, tx, config, checkpoint, metadata, new_versions), write=True
            )

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        lease = self._turn_lease(config)
        if lease is not None:
            await lease.averify()
        self._forget_read(config)
        await self._run(
            lambda tx: _write.put_writes(self._ctx, tx, config, writes, task_id, task_path), write=True
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(lambda tx: _prune.delete_threads(self._ctx, tx, [str(thread_id)]), write=True)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread_id in await self._run(
            lambda tx: _prune.threads_of_runs(self._ctx, sorted(wanted)), write=False
        ):
            await self._run(functools.partial(self._prune_one, thread_id, _prune.of_runs(wanted)), write=True)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(
            lambda tx: _prune.copy_thread(self._ctx, str(source_thread_id), str(target_thread_id)), write=True
        )

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> None:
        """Async version of :meth:`SyncSaver.prune`."""
        await self.aprune_threads(thread_ids, strategy=strategy, older_than=older_than)

    async def aprune_threads(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> int:
        """Async version of :meth:`SyncSaver.prune_threads`."""
        ids = self._check_prune(thread_ids, strategy)
        cutoff = _cutoff(older_than)
        if strategy == "delete":
            if cutoff is not None:
                ids = await self._run(functools.partial(self._idle, ids, cutoff), write=False)
            await self._run(lambda tx: _prune.delete_threads(self._ctx, tx, ids), write=True)
            return len(ids)
        pick = _prune.keep_latest(cutoff)
        total = 0
        for t in ids:
            total += await self._run(functools.partial(self._prune_one, t, pick), write=True)
        return total

    async def alist_threads(self) -> builtins.list[str]:
        """Async version of :meth:`SyncSaver.list_threads`."""
        return await self._run(lambda tx: _read.list_threads(self._ctx), write=False)

    async def astats(self) -> CheckpointStats:
        """Async version of :meth:`SyncSaver.stats`."""
        return await self._run(lambda tx: _stats_op(self._ctx), write=False)

    # The sync API of an async saver runs on its event loop, from another thread.

    def _sync(self, coro: Awaitable[T]) -> T:
        try:
            if asyncio.get_running_loop() is self.loop:
                raise asyncio.InvalidStateError(
                    "synchronous calls to an async remem saver from its own event loop would block it; "
                    "use the a* methods (await saver.aget_tuple(...)) or a sync saver"
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._sync(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> None:
        self._sync(self.aprune(thread_ids, strategy=strategy, older_than=older_than))

    def prune_threads(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        older_than: timedelta | datetime | None = None,
    ) -> int:
        return self._sync(self.aprune_threads(thread_ids, strategy=strategy, older_than=older_than))

    def list_threads(self) -> builtins.list[str]:
        return self._sync(self.alist_threads())

    def stats(self) -> CheckpointStats:
        return self._sync(self.astats())
