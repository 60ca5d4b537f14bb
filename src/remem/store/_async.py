"""An async store: LangGraph's async lifecycle methods, and the ``abatch`` calls made at once combined into
one transaction. The logic is :class:`~remem.store._base.RememStoreBase`'s; this drives it from async code."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from langgraph.store.base import Op, PutOp, Result

from remem._statements import AExecute, Program, Retry, aretrying, arun, cancelling
from remem.errors import EmbedderMismatchError
from remem.store import _program as prog
from remem.store import _rows, _write
from remem.store._base import Fence, RememStoreBase, query_texts
from remem.store._core import SearchMode
from remem.store._exec import Tx, Vector

T = TypeVar("T")

logger = logging.getLogger(__name__)

_COMBINE_MAX = 2000  # ops per combined transaction


class AsyncStore(RememStoreBase):
    """The lifecycle methods of an async store, awaitable as in LangGraph's async stores, and ``abatch``
    calls made concurrently combined into one transaction (as LangGraph's ``AsyncBatchedBaseStore``
    does): ten thousand ``aput`` / ``aget`` awaited together cost a few transactions, not ten thousand."""

    _sweeper_task: asyncio.Task[None] | None = None
    _queued: list[tuple[list[Op], asyncio.Future[list[Result]]]] | None = None
    _drainer: asyncio.Task[None] | None = None

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:  # a bad op fails its own caller, not the others it would be combined with
            if isinstance(op, PutOp):
                _write.check_put(op, encode=True)
            else:
                _rows.validate_op(op)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Result]] = loop.create_future()
        if self._queued is None:
            self._queued = []
            self._drainer = loop.create_task(self._drain())  # a reference keeps the task alive
        self._queued.append((ops, done))
        return await done

    async def _drain(self) -> None:
        """Run what was queued while this task waited its turn, a few thousand ops per transaction."""
        await asyncio.sleep(0)
        queued, self._queued = self._queued or [], None
        while queued:
            taken: list[tuple[list[Op], asyncio.Future[list[Result]]]] = []
            size = 0
            while queued and (not taken or size + len(queued[0][0]) <= _COMBINE_MAX):
                taken.append(queued.pop(0))
                size += len(taken[-1][0])
            combined = [op for ops, _ in taken for op in ops]
            try:
                results = await self._abatch_now(combined)
            except BaseException as exc:
                for _, done in taken:
                    if not done.done():
                        done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            start = 0
            for ops, done in taken:
                if not done.done():
                    done.set_result(results[start : start + len(ops)])
                start += len(ops)

    async def _abatch_now(self, ops: list[Op]) -> list[Result]:
        """Run one combined batch (in a worker thread unless the backend has an async driver)."""
        return await asyncio.to_thread(self.batch, ops)

    # -------------------------------------------------- the async driver (a backend with an async client)

    aretry: Retry | None = None
    """Async version of :attr:`retry`, used by :meth:`_arun`."""

    def _atransaction(
        self, write: bool, snapshot: bool = True
    ) -> contextlib.AbstractAsyncContextManager[AExecute]:
        """Async version of :meth:`_transaction`."""
        raise NotImplementedError

    def _async_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """What one async transaction at a time holds (none: each has its own connection)."""
        return contextlib.nullcontext()

    async def _arun(
        self,
        make: Callable[[Tx], Program[T]],
        *,
        write: bool,
        snapshot: bool = True,
        ready: Mapping[bytes, Vector] | None = None,
    ) -> T:
        """Async version of :meth:`_run`."""
        return await aretrying(lambda: self._arun_once(make, write, snapshot, ready), self.aretry)

    async def _arun_once(
        self,
        make: Callable[[Tx], Program[T]],
        write: bool,
        snapshot: bool,
        ready: Mapping[bytes, Vector] | None,
    ) -> T:
        self._check_writable(write)
        rechosen, identity = False, self.plan.identity if self.plan is not None else None
        async with self._async_lock():
            while True:
                tx = Tx(self._vectors(), ready or {})
                try:
                    result = await arun(
                        self._in_transaction(make(tx), tx), lambda: self._atransaction(write, snapshot)
                    )
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
                ready = {**tx.ready, **(await asyncio.to_thread(self._embed_texts, tx.unembedded))}
        if tx.changes:
            self._vectors_changed(tx)
        if tx.touched and not self.read_only:
            ids = sorted(set(tx.touched))
            await self._arun(lambda _: prog.refresh_program(self.dialect, ids, self.clock()), write=True)
        return result

    async def _aembed_ahead(self, ops: list[Op], mode: SearchMode) -> dict[bytes, Vector]:
        """Async version of :meth:`_embed_ahead` (the model runs in a worker thread)."""
        plan = self.plan
        if plan is None:
            return {}
        if any(isinstance(op, PutOp) for op in ops):
            texts = await self._arun(
                lambda _: _write.texts_to_embed_program(self.dialect, plan, ops, mode),
                write=False,
                snapshot=False,
            )
        elif mode in ("hybrid", "vector"):
            texts = query_texts(ops)
        else:
            texts = {}
        return await asyncio.to_thread(self._embed_texts, texts) if texts else {}

    async def _abatch_native(self, ops: list[Op], fence: Fence | None = None) -> list[Result]:
        """:meth:`_abatch_now` on the async driver (a backend with an async client uses it); ``fence``:
        as :meth:`fenced_batch`'s."""
        write = any(isinstance(op, PutOp) for op in ops)
        self._check_writable(write)
        ready = await self._aembed_ahead(ops, self.search_mode)
        return await self._arun(
            self._batch_program(ops, fence),
            write=write,
            ready=ready,
        )

    async def setup(self) -> None:
        """Async version of :meth:`SyncStore.setup`."""
        await asyncio.to_thread(self._setup_now)

    async def sweep_ttl(self) -> int:
        """Async version of :meth:`SyncStore.sweep_ttl`."""
        return await self.asweep_ttl()

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in a task on the running loop."""
        if self._sweeper_task is not None and not self._sweeper_task.done():
            return self._sweeper_task
        seconds = self._sweep_interval(sweep_interval_minutes) * 60

        async def loop() -> None:
            # A cancel can be lost inside a sweep: the driver may raise an error of its own in its place,
            # and Python 3.11's wait_for (in psycopg_pool) may swallow it. So each round asks the task,
            # and a cancelled sweeper ends.
            while not cancelling():
                await asyncio.sleep(seconds)
                try:
                    await self.asweep_ttl()
                except Exception:  # keep sweeping; the next round retries
                    if not cancelling():
                        logger.exception("TTL sweep failed; retrying at the next interval")

        self._sweeper_task = asyncio.create_task(loop(), name="remem-ttl-sweeper")
        return self._sweeper_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; True if it stopped."""
        task, self._sweeper_task = self._sweeper_task, None
        if task is None or task.done():
            return True
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)
