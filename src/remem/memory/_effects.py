"""Logic once, I/O twice: the client's operations are generators that yield what they need done.

A plan yields :class:`StoreCall` (a batch of LangGraph store ops) or :class:`SummarizeCall` and is sent
the result back; :func:`run` drives a plan with a store's ``batch`` and a summariser's ``summarize``,
:func:`arun` with ``abatch`` and ``asummarize``. The plans themselves do no I/O.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, Op

from remem.errors import RememError, StorageError
from remem.summarize import Summarizer, SummaryResult

__all__ = ["Plan", "StoreCall", "SummarizeCall", "arun", "run"]

T = TypeVar("T")


@dataclass(frozen=True)
class StoreCall:
    ops: Sequence[Op]


@dataclass(frozen=True)
class SummarizeCall:
    previous: str
    messages: Sequence[BaseMessage]


Effect = StoreCall | SummarizeCall
Plan = Generator[Effect, Any, T]


def _storage_failed(exc: Exception) -> StorageError:
    return StorageError(
        f"the memory store failed ({type(exc).__name__}: {exc}); nothing was changed by this call. "
        "Check that the database is reachable and retry"
    )


def run(plan: Plan[T], store: BaseStore, summarizer: Summarizer) -> T:
    """Drive ``plan`` synchronously."""
    result: Any = None
    try:
        while True:
            effect = plan.send(result)
            if isinstance(effect, StoreCall):
                try:
                    result = store.batch(effect.ops)
                except RememError:
                    raise
                except Exception as exc:
                    raise _storage_failed(exc) from exc
            else:
                result = summarizer.summarize(effect.previous, effect.messages)
    except StopIteration as stop:
        value: T = stop.value
        return value


async def arun(plan: Plan[T], store: BaseStore, summarizer: Summarizer) -> T:
    """Async version of :func:`run`."""
    result: Any = None
    try:
        while True:
            effect = plan.send(result)
            if isinstance(effect, StoreCall):
                try:
                    result = await store.abatch(effect.ops)
                except RememError:
                    raise
                except Exception as exc:
                    raise _storage_failed(exc) from exc
            else:
                summary: SummaryResult = await summarizer.asummarize(effect.previous, effect.messages)
                result = summary
    except StopIteration as stop:
        value: T = stop.value
        return value
