"""The sync saver: the saver API over a blocking driver, each operation in one transaction; its
``a*`` methods run the sync ones in a worker thread."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
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
from remem._statements import Execute, Program, run
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
from remem.errors import StaleCacheError

T = TypeVar("T")

__all__ = ["SyncSaver"]


class SyncSaver(RememSaver):
    """A remem saver over a blocking driver; subclasses implement :meth:`_transaction`."""

    def _transaction(self, write: bool, snapshot: bool = True) -> contextlib.AbstractContextManager[Execute]:
        raise NotImplementedError

    def _run(
        self, make: Callable[[ops.Tx], Program[T]], *, write: bool, setup: bool = True, snapshot: bool = True
    ) -> T:
        if write and self.read_only:
            raise read_only_error(self._where)
        if setup and not self._is_setup:
            self.setup()
        tx = ops.Tx(snapshot=snapshot)
        try:
            result = run(make(tx), lambda: self._transaction(write, snapshot))
        except StaleCacheError:  # a write that trusted the cache (a read that took no snapshot) made nothing
            tx = ops.Tx(trust_cache=False)
            result = run(make(tx), lambda: self._transaction(write))
        for hook in tx.after_commit:
            hook()
        return result

    def setup(self) -> None:
        """Create or migrate the tables; idempotent and safe to run from many processes at once.

        A read-only saver checks them instead and raises :class:`~remem.errors.NotFoundError` when they are
        missing. A database written by a newer remem raises :class:`~remem.errors.SchemaTooNewError`.
        """
        if self.read_only or not self._run(lambda tx: schema_current(self._ctx), write=False, setup=False):
            self._run(
                lambda tx: setup_op(self._ctx, self.read_only, self._where),
                write=not self.read_only,
                setup=False,
            )
        self._is_setup = True

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        scratch = self._scratch(config)
        if scratch is None:
            found = self._run(lambda tx: _read.get_tuple(self._ctx, config, tx), write=False, snapshot=False)
            return _read.mark_loaded(self._ctx, config, found)
        kept = scratch.get(HEAD_READ)
        if (
            kept is not None
            and self._run(lambda tx: _read.head_stamp(self._ctx, config), write=False, snapshot=False)
            == kept[0]
        ):
            return _read.mark_loaded(self._ctx, config, _read.fresh_copy(kept[1]))
        stamp, tup = self._run(
            lambda tx: _read.get_head(self._ctx, config, tx),
            write=False,
            snapshot=self._dialect.name != "postgres",
        )
        if tup is not None:
            scratch[HEAD_READ] = (stamp, tup)
            tup = _read.fresh_copy(tup)
        return _read.mark_loaded(self._ctx, config, tup)

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
        shared = (
            _delta.Shared()
        )  # a listing's pages share their values (and, on a DeltaChannel graph, a listing)
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
        run = config["configurable"].get(ops.RUN_MARK)
        try:
            with self._ctx.claims.putting(run, checkpoint["id"]):
                written = self._put(config, checkpoint, metadata, new_versions, in_transaction=True)
                if written is None:  # another session holds the thread's lease: wait for it
                    written = self._put(config, checkpoint, metadata, new_versions, in_transaction=False)
                assert written is not None  # only a lease taken in the transaction answers None
        except Exception as exc:
            if run:
                self._ctx.claims.record_failed(run, exc)
            raise
        if run:
            self._ctx.claims.record_written(run, checkpoint["id"])
        return written

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        in_transaction: bool,
    ) -> RunnableConfig | None:
        """One try at :meth:`put` under its lease; None when the lease its transaction took was busy."""
        with self._run_lease(config, in_transaction) as lease:
            if lease is not None:
                lease.verify()
            with (
                self._putting(config, checkpoint["id"]),
                self._ctx.cache.write_lock(ops.thread_id_of(config["configurable"])),
            ):
                try:
                    return self._run(
                        lambda tx: _write.put(
                            self._ctx, tx, config, checkpoint, metadata, new_versions, lease
                        ),
                        write=True,
                    )
                except StaleCacheError:
                    if lease is None or not lease.in_transaction:
                        raise
                    return None

    def _read_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        return self._run(
            lambda tx: _delta.history(self._ctx, tx, config, channels),
            write=False,
            snapshot=not _delta.one_statement(self._ctx, config, channels),
        )

    async def _aread_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        return await asyncio.to_thread(self._read_history, config, channels)

    def _head_id(self, thread_id: str) -> str | None:
        stamp = self._run(
            lambda tx: _read.head_stamp(self._ctx, head_config(thread_id)), write=False, snapshot=False
        )
        return None if stamp is None else str(stamp[0])

    async def _ahead_id(self, thread_id: str) -> str | None:
        return await asyncio.to_thread(self._head_id, thread_id)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        lease = self._turn_lease(config)
        if lease is not None:
            lease.verify()
        self._forget_read(config)
        run = _write.run_of(config["configurable"])
        if run is not None:  # LangGraph saves a checkpoint and the writes on it at once: the put first
            self._ctx.claims.settle(
                run, str(config["configurable"]["checkpoint_id"]), 2 * DEFAULT_LEASE_TIMEOUT
            )

        def write(stored_only: bool) -> bool:
            with self._ctx.cache.write_lock(ops.thread_id_of(config["configurable"])):
                return self._run(
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

        if not write(run is not None):
            # A run's writes on a checkpoint that was refused or erased would be orphans holding what the
            # erasure removed; one whose put is still under way is written once that put is.
            follows = self._writes_follow(str(run), str(config["configurable"]["checkpoint_id"]))
            if follows is not False:
                write(follows is True)

    def delete_thread(self, thread_id: str) -> None:
        self._listings.forget()  # what was listed may be gone
        self._run(lambda tx: _prune.delete_threads(self._ctx, tx, [str(thread_id)]), write=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        self._listings.forget()  # what was listed may be gone
        for thread_id in self._run(lambda tx: _prune.threads_of_runs(self._ctx, sorted(wanted)), write=False):
            self._run(functools.partial(self._prune_one, thread_id, _prune.of_runs(wanted)), write=True)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._listings.forget()  # what was listed may be gone
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
        cutoff = cutoff_of(older_than)
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
        return self._run(lambda tx: stats_op(self._ctx), write=False)

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
