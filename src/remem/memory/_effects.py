"""Logic once, I/O twice: the client's operations are flows (:mod:`remem._statements`' one generator shape)
that yield what they need done.

A flow yields :class:`StoreCall` (a batch of LangGraph store ops), :class:`SummarizeCall` or
:class:`Leased` (a sub-flow run holding the thread's lease) and is sent the result back; :func:`run`
drives a flow with a store's ``batch`` and a summariser's ``summarize``, :func:`arun` with ``abatch`` and
``asummarize`` (both with :func:`remem._statements.drive` / ``adrive``). The flows themselves do no I/O.

:func:`run` gives a flow's reads one read session of the store (:func:`remem.store._targets.reading`: one
transaction on PostgreSQL for a card's half-dozen steps), closed before each write, lease or model call so
that no connection waits in a transaction for them, and opened again by the next read.

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
from remem.store._reads import Reads
from remem.store._targets import afenced_batch, fenced_batch, reading
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
    "together",
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


def together(first: Flow[Any], second: Flow[Any]) -> Flow[tuple[Any, Any]]:
    """Both flows' results, their store calls made side by side: while both wait on a store call, the
    two go as one batch (one transaction, and one statement for their gets where the store can), so two
    independent reads of a card cost one round trip. Any other effect (a lease, a model call) runs alone,
    in the order the flows ask. Neither flow may depend on what the other writes."""
    flows = (first, second)
    asked: list[Any] = [_statements.start(f) for f in flows]
    while True:
        waiting = [i for i, a in enumerate(asked) if not isinstance(a, _statements.Done)]
        if not waiting:
            return asked[0].value, asked[1].value
        calls = [i for i in waiting if isinstance(asked[i], StoreCall)]
        if len(calls) == 2 and not any(_writes(asked[i]) for i in calls):
            sizes = [len(asked[i].ops) for i in calls]
            results = yield StoreCall([*asked[0].ops, *asked[1].ops])
            answers = [results[: sizes[0]], results[sizes[0] :]]
        else:
            calls = waiting[:1]
            answers = [(yield asked[calls[0]])]
        for i, answer in zip(calls, answers, strict=True):
            try:
                asked[i] = flows[i].send(answer)
            except StopIteration as done:
                asked[i] = _statements.Done(done.value)


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


class _Reads:
    """A flow's read session (:func:`run`): opened by its first read, closed by :meth:`close`."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store
        self._session: AbstractContextManager[Reads] | None = None
        self._reads: Reads | None = None

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        if self._reads is None:
            session = reading(self.store)
            self._reads = session.__enter__()
            self._session = session
        return self._reads(ops)

    def close(self) -> None:
        session, self._session, self._reads = self._session, None, None
        if session is not None:
            with contextlib.suppress(StorageError):  # its COMMIT: it wrote nothing, its reads are done
                session.__exit__(None, None, None)


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

    reads = _Reads(store)

    def reply(effect: Effect) -> Any:
        if isinstance(effect, StoreCall) and not _writes(effect):
            try:
                return reads.batch(effect.ops)
            except RememError:
                raise
            except Exception as exc:
                raise _storage_failed(exc) from exc
        reads.close()  # before a write, a lease or a model call
        if isinstance(effect, StoreCall):
            if guard is not None:
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

    try:
        return _statements.drive(plan, reply)
    finally:
        reads.close()


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
