"""The async saver: the saver API over an asyncio driver, each operation in one transaction; its sync
methods run the async ones on its event loop from another thread (as the stock async savers do)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from remem._lease import DEFAULT_LEASE_TIMEOUT
from remem._statements import AExecute, Program, arun
from remem.checkpoint import _delta, _prune, _read, _write
from remem.checkpoint import _ops as ops
from remem.checkpoint._base import (
    HEAD_READ,
    CheckpointStats,
    RememSaver,
    cutoff_of,
    head_config,
    read_only_error,
    schema_current,
    setup_op,
    stats_op,
)
from remem.checkpoint._cache import WRITE_STRIPES, stripe
from remem.errors import StaleCacheError

T = TypeVar("T")

__all__ = ["AsyncSaver"]


class AsyncSaver(RememSaver):
    """A remem saver over an asyncio driver; subclasses implement :meth:`_transaction`."""

    loop: asyncio.AbstractEventLoop

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._setup_lock = asyncio.Lock()
        self.loop = asyncio.get_running_loop()
        self._write_locks = [asyncio.Lock() for _ in range(WRITE_STRIPES)]  # see SaverCache.write_lock

    def _transaction(
        self, write: bool, snapshot: bool = True
    ) -> contextlib.AbstractAsyncContextManager[AExecute]:
        raise NotImplementedError

    async def _run(
        self, make: Callable[[ops.Tx], Program[T]], *, write: bool, setup: bool = True, snapshot: bool = True
    ) -> T:
        """Async version of :meth:`SyncSaver._run`."""
        if write and self.read_only:
            raise read_only_error(self._where)
        if setup and not self._is_setup:
            await self.setup()
        tx = ops.Tx(snapshot=snapshot)
        try:
            result = await arun(make(tx), lambda: self._transaction(write, snapshot))
        except StaleCacheError:  # a write that trusted the cache wrote nothing: again, reading what it needs
            tx = ops.Tx(trust_cache=False)
            result = await arun(make(tx), lambda: self._transaction(write))
        for hook in tx.after_commit:
            hook()
        return result

    async def setup(self) -> None:
        """Async version of :meth:`SyncSaver.setup`."""
        async with self._setup_lock:
            if self._is_setup:
                return
            if self.read_only or not await self._run(
                lambda tx: schema_current(self._ctx), write=False, setup=False
            ):
                await self._run(
                    lambda tx: setup_op(self._ctx, self.read_only, self._where),
                    write=not self.read_only,
                    setup=False,
                )
            self._is_setup = True

    async def _aread_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        return await self._run(
            lambda tx: _delta.history(self._ctx, tx, config, channels),
            write=False,
            snapshot=not _delta.one_statement(self._ctx, config, channels),
        )

    def _read_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        return self._sync(self._aread_history(config, channels))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await self.alease_target()  # known before a turn's lease is compared with it (aiosqlite: async)
        scratch = self._scratch(config)
        if scratch is None:
            found = await self._run(
                lambda tx: _read.get_tuple(self._ctx, config, tx), write=False, snapshot=False
            )
            return _read.mark_loaded(self._ctx, config, found)
        kept = scratch.get(HEAD_READ)
        if (
            kept is not None
            and await self._run(lambda tx: _read.head_stamp(self._ctx, config), write=False, snapshot=False)
            == kept[0]
        ):
            return _read.mark_loaded(self._ctx, config, _read.fresh_copy(kept[1]))
        stamp, tup = await self._run(
            lambda tx: _read.get_head(self._ctx, config, tx),
            write=False,
            snapshot=self._dialect.name != "postgres",
        )
        if tup is not None:
            scratch[HEAD_READ] = (stamp, tup)
            tup = _read.fresh_copy(tup)
        return _read.mark_loaded(self._ctx, config, tup)

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
        shared = (
            _delta.Shared()
        )  # a listing's pages share their values (and, on a DeltaChannel graph, a listing)
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
        run = config["configurable"].get(ops.RUN_MARK)
        await self.alease_target()
        try:
            with self._ctx.claims.putting(run, checkpoint["id"]):
                written = await self._aput(config, checkpoint, metadata, new_versions, in_transaction=True)
                if written is None:  # see SyncSaver.put
                    written = await self._aput(
                        config, checkpoint, metadata, new_versions, in_transaction=False
                    )
                assert written is not None
        except Exception as exc:
            if run:
                self._ctx.claims.record_failed(run, exc)
            raise
        if run:
            self._ctx.claims.record_written(run, checkpoint["id"])
        return written

    async def _aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        in_transaction: bool,
    ) -> RunnableConfig | None:
        """Async version of ``SyncSaver._put``."""
        async with self._arun_lease(config, in_transaction) as lease:
            if lease is not None:
                await lease.averify()
            with self._putting(config, checkpoint["id"]):
                async with self._write_locks[stripe(ops.thread_id_of(config["configurable"]))]:
                    try:
                        return await self._run(
                            lambda tx: _write.put(
                                self._ctx, tx, config, checkpoint, metadata, new_versions, lease
                            ),
                            write=True,
                        )
                    except StaleCacheError:
                        if lease is None or not lease.in_transaction:
                            raise
                        return None

    async def _ahead_id(self, thread_id: str) -> str | None:
        stamp = await self._run(
            lambda tx: _read.head_stamp(self._ctx, head_config(thread_id)), write=False, snapshot=False
        )
        return None if stamp is None else str(stamp[0])

    def _head_id(self, thread_id: str) -> str | None:
        return self._sync(self._ahead_id(thread_id))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self.alease_target()
        lease = self._turn_lease(config)
        if lease is not None:
            await lease.averify()
        self._forget_read(config)
        run = _write.run_of(config["configurable"])
        cid = str(config["configurable"]["checkpoint_id"])
        if run is not None and self._ctx.claims.in_flight(run, cid):  # see SyncSaver.put_writes
            await asyncio.to_thread(self._ctx.claims.settle, run, cid, 2 * DEFAULT_LEASE_TIMEOUT)

        async def write(stored_only: bool) -> bool:
            async with self._write_locks[stripe(ops.thread_id_of(config["configurable"]))]:
                return await self._run(
                    lambda tx: _write.put_writes(
                        self._ctx,
                        tx,
                        config,
                        writes,
                        task_id,
                        task_path,
                        stored_only=stored_only,
                        lease=lease,
                    ),
                    write=True,
                )

        if not await write(run is not None):  # see SyncSaver.put_writes
            follows = await asyncio.to_thread(
                self._writes_follow, str(run), str(config["configurable"]["checkpoint_id"])
            )
            if follows is not False:
                await write(follows is True)

    async def adelete_thread(self, thread_id: str) -> None:
        self._listings.forget()  # what was listed may be gone
        await self._run(lambda tx: _prune.delete_threads(self._ctx, tx, [str(thread_id)]), write=True)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        self._listings.forget()  # what was listed may be gone
        for thread_id in await self._run(
            lambda tx: _prune.threads_of_runs(self._ctx, sorted(wanted)), write=False
        ):
            await self._run(functools.partial(self._prune_one, thread_id, _prune.of_runs(wanted)), write=True)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._listings.forget()  # what was listed may be gone
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
        cutoff = cutoff_of(older_than)
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
        return await self._run(lambda tx: stats_op(self._ctx), write=False)

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
