"""Logic once, I/O twice: the client's operations are flows (:mod:`remem._statements`' one generator shape)
that yield what they need done.

A flow yields :class:`StoreCall` (a batch of LangGraph store ops), :class:`SummarizeCall` or
:class:`Leased` (a sub-flow run holding the thread's lease) and is sent the result back; :func:`run`
drives a flow with a store's ``batch`` and a summariser's ``summarize``, :func:`arun` with ``abatch`` and
``asummarize`` (both with :func:`remem._statements.drive` / ``adrive``). The flows themselves do no I/O.

Every write of a :class:`Leased` sub-plan is made only after the lease is checked to be still held
(:meth:`Guard.verify`): a holder whose lease the database dropped (a PostgreSQL session ended, a SQLite
lease file deleted) fails with :class:`~remem.errors.StorageError` instead of overwriting what the next
holder wrote. On remem's stores (:class:`~remem.store._targets.Fenced`) the write's own transaction also
checks the lease's fencing token (:meth:`Guard.fenced`), so a lease lost after that check and taken by
another writer before the commit still writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, Op, PutOp

from remem import _statements
from remem.errors import RememError, StorageError
from remem.store._targets import afenced_batch, fenced_batch
from remem.summarize import Summarizer, SummaryResult
from remem.usage import Meter
from remem.usage._records import call_id_of

__all__ = [
    "SUMMARY_NODE",
    "ALease",
    "Flow",
    "Guard",
    "Lease",
    "Leased",
    "StoreCall",
    "SummarizeCall",
    "arun",
    "run",
]

T = TypeVar("T")
SUMMARY_NODE = "memory.summary"
"""The ledger's ``node`` of the memory client's summariser calls (each one writes a summary revision)."""


@dataclass(frozen=True)
class StoreCall:
    ops: Sequence[Op]


@dataclass(frozen=True)
class SummarizeCall:
    """Extend ``previous`` with ``messages``: a summariser call, recorded in the usage ledger for the
    thread and user it is made for when the driver has a meter."""

    previous: str
    messages: Sequence[BaseMessage]
    thread_id: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class Leased:
    """Run ``plan`` holding ``thread_id``'s lease: what it reads is not changed by another writer before
    it writes (a read-modify-write of the thread's metadata, numbering of appended messages)."""

    thread_id: str
    plan: Generator[Any, Any, Any]


class Guard(Protocol):
    """A held lease, as a writer sees it (:class:`remem._lease.ThreadLease`)."""

    def verify(self) -> None:
        """Raise :class:`~remem.errors.StorageError` if the lease is no longer held."""

    async def averify(self) -> None:
        """Async version of :meth:`verify`."""

    def fenced(self, dialect: Any) -> _statements.Program[None]:
        """The check of the lease's fencing token, run in the transaction of each write."""


Effect = StoreCall | SummarizeCall | Leased
Flow = _statements.Flow[Effect, T]
"""A memory operation: a flow of effects that returns a T."""
Lease = Callable[[str], AbstractContextManager[Guard | None]]
ALease = Callable[[str], AbstractAsyncContextManager[Guard | None]]


def _no_lease(thread_id: str) -> AbstractContextManager[Guard | None]:
    return contextlib.nullcontext()


@contextlib.asynccontextmanager
async def _no_alease(thread_id: str) -> Any:
    yield None


def _writes(call: StoreCall) -> bool:
    return any(isinstance(op, PutOp) for op in call.ops)


def _storage_failed(exc: Exception) -> StorageError:
    return StorageError(
        f"the memory store failed ({type(exc).__name__}: {exc}); nothing was changed by this call. "
        "Check that the database is reachable and retry"
    )


def _record(meter: Meter | None, call: SummarizeCall, result: SummaryResult) -> None:
    """One ledger row for a summariser that called a model (the extractive one calls none: no row)."""
    if meter is None or not result.input_tokens:
        return
    meter.record(
        "summariser",
        result.model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        source="counted" if result.extra.get("source") == "counted" else "provider",
        thread_id=call.thread_id,
        user_id=call.user_id,
        node=SUMMARY_NODE,
        latency_ms=result.latency_ms,
        call_id=call_id_of(call.thread_id, result.extra.get("reply_id")),
    )


def run(
    plan: Flow[T],
    store: BaseStore,
    summarizer: Summarizer,
    lease: Lease = _no_lease,
    meter: Meter | None = None,
    guard: Guard | None = None,
) -> T:
    """Drive ``plan`` synchronously; ``lease(thread_id)`` holds a thread's lease for a :class:`Leased`;
    ``meter`` records each summariser call in the usage ledger; ``guard``: the lease the plan runs under,
    verified before each of its writes."""

    def reply(effect: Effect) -> Any:
        if isinstance(effect, StoreCall):
            if guard is not None and _writes(effect):
                guard.verify()
                fenced = guard.fenced
            else:
                fenced = None
            try:
                return store.batch(effect.ops) if fenced is None else fenced_batch(store, effect.ops, fenced)
            except RememError:
                raise
            except Exception as exc:
                raise _storage_failed(exc) from exc
        if isinstance(effect, Leased):
            with lease(effect.thread_id) as held:
                return run(effect.plan, store, summarizer, lease, meter, held)
        result = summarizer.summarize(effect.previous, effect.messages)
        _record(meter, effect, result)
        return result

    return _statements.drive(plan, reply)


async def arun(
    plan: Flow[T],
    store: BaseStore,
    summarizer: Summarizer,
    lease: ALease = _no_alease,
    meter: Meter | None = None,
    guard: Guard | None = None,
) -> T:
    """Async version of :func:`run`."""

    async def reply(effect: Effect) -> Any:
        if isinstance(effect, StoreCall):
            if guard is not None and _writes(effect):
                await guard.averify()
                fenced = guard.fenced
            else:
                fenced = None
            try:
                if fenced is None:
                    return await store.abatch(effect.ops)
                return await afenced_batch(store, effect.ops, fenced)
            except RememError:
                raise
            except Exception as exc:
                raise _storage_failed(exc) from exc
        if isinstance(effect, Leased):
            async with lease(effect.thread_id) as held:
                return await arun(effect.plan, store, summarizer, lease, meter, held)
        summary: SummaryResult = await summarizer.asummarize(effect.previous, effect.messages)
        if meter is not None:
            await asyncio.to_thread(_record, meter, effect, summary)
        return summary

    return await _statements.adrive(plan, reply)
