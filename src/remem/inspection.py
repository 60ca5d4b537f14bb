"""Inspection: what a thread holds now, what it held at each checkpoint, and what it cost.

Works on any checkpointer, with no chat model: the agent's graph is rebuilt around a placeholder model
only to read its state.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.graph.state import CompiledStateGraph

from remem.agent import UsageRecord, build_agent
from remem.errors import NotFoundError
from remem.models import ScriptedChatModel

__all__ = ["HistoryRow", "ThreadSnapshot", "reader_graph", "thread_history", "thread_snapshot"]


@dataclass(frozen=True)
class ThreadSnapshot:
    """A thread's state at one checkpoint."""

    thread_id: str
    checkpoint_id: str
    created_at: str
    messages: list[BaseMessage]
    summary: str
    next: tuple[str, ...]
    usage: list[UsageRecord] = field(default_factory=list)

    @property
    def input_tokens(self) -> int:
        return sum(r["input_tokens"] for r in self.usage)

    @property
    def output_tokens(self) -> int:
        return sum(r["output_tokens"] for r in self.usage)


@dataclass(frozen=True)
class HistoryRow:
    """One checkpoint of a thread, newest first in :func:`thread_history`."""

    step: int
    checkpoint_id: str
    created_at: str
    message_count: int
    next: tuple[str, ...]
    source: str


def reader_graph(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent's graph over ``checkpointer``, for reading state only (its model never answers)."""
    return build_agent(ScriptedChatModel(), strategy="filter", checkpointer=checkpointer)


def _config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def thread_snapshot(
    graph: CompiledStateGraph[Any, Any, Any, Any], thread_id: str, checkpoint_id: str | None = None
) -> ThreadSnapshot:
    """The thread's latest state, or its state at ``checkpoint_id`` (time travel)."""
    state = graph.get_state(_config(thread_id, checkpoint_id))
    if state.config is None or not state.created_at:
        what = f"checkpoint {checkpoint_id} of thread" if checkpoint_id else "thread"
        raise NotFoundError(f"{what} {thread_id!r} does not exist; `remem threads` lists the threads")
    values = state.values or {}
    return ThreadSnapshot(
        thread_id=thread_id,
        checkpoint_id=str(state.config["configurable"].get("checkpoint_id", "")),
        created_at=state.created_at,
        messages=list(values.get("messages", [])),
        summary=str(values.get("summary", "")),
        next=tuple(state.next),
        usage=[*values.get("usage", []), *_ledger_usage(graph, thread_id, state.created_at)],
    )


def _ledger_usage(
    graph: CompiledStateGraph[Any, Any, Any, Any], thread_id: str, until: str
) -> list[UsageRecord]:
    """The thread's model calls up to ``until`` from the usage ledger of its database (read-only)."""
    from remem.usage import read_ledger_of

    saver = graph.checkpointer
    if not isinstance(saver, BaseCheckpointSaver):
        return []
    with read_ledger_of(saver) as ledger:
        events = [] if ledger is None else ledger.events(thread_id=thread_id)
    cutoff = datetime.fromisoformat(until).timestamp()
    return [
        UsageRecord(
            turn=e.turn or 0,
            node=e.node or e.kind,
            model=e.model,
            input_tokens=e.input_tokens,
            output_tokens=e.output_tokens,
            latency_ms=e.latency_ms or 0.0,
            at=str(e.as_dict()["at"]),
        )
        for e in events
        if e.at <= cutoff + 1.0  # a call is recorded just before the checkpoint that holds its reply
    ]


_NULL_TASK = "00000000-0000-0000-0000-000000000000"
"""LangGraph's task id for writes outside any node (an update the graph applies to the values it shows)."""


@runtime_checkable
class _SizedSaver(Protocol):
    """remem's savers (checked by shape, so that no database driver is imported here)."""

    def list_sized(
        self, config: RunnableConfig, *, sized: Collection[str], limit: int | None = None
    ) -> Iterator[tuple[CheckpointTuple, dict[str, int]]]: ...


class _CountingReader(BaseCheckpointSaver[Any]):
    """Lists a remem saver's checkpoints with the messages left unread, their counts kept aside.

    The graph still works out ``next`` from each checkpoint (that needs no message, nor the value of
    a task's pending write); a checkpoint with a pending update outside any task to the messages is
    read whole, since the graph applies it to the list it shows.
    """

    def __init__(self, saver: BaseCheckpointSaver[Any], sized: _SizedSaver) -> None:
        super().__init__(serde=saver.serde)
        self._saver = saver
        self._sized = sized
        self.counts: dict[str, int] = {}

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None or filter or before:
            yield from self._saver.list(config, filter=filter, before=before, limit=limit)
            return
        for tup, lengths in self._sized.list_sized(config, sized=("messages",), limit=limit):
            if any(w[0] == _NULL_TASK and w[1] == "messages" for w in tup.pending_writes or ()):
                whole = self._saver.get_tuple(tup.config)
                if whole is not None:
                    yield whole
                    continue
            if "messages" in lengths:
                self.counts[str(tup.config["configurable"]["checkpoint_id"])] = lengths["messages"]
            yield tup

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._saver.get_tuple(config)


def thread_history(
    graph: CompiledStateGraph[Any, Any, Any, Any], thread_id: str, limit: int | None = 50
) -> list[HistoryRow]:
    """The thread's checkpoints, newest first (at most ``limit``).

    On remem's savers no message is read, only each checkpoint's count, so memory does not grow with
    the thread's length; other savers decode every checkpoint's messages (LangGraph's own path).
    """
    counts: dict[str, int] = {}
    saver = graph.checkpointer
    if isinstance(saver, BaseCheckpointSaver) and isinstance(saver, _SizedSaver):
        reader = _CountingReader(saver, saver)
        counts = reader.counts
        graph = graph.copy(update={"checkpointer": reader})
    rows = []
    for state in graph.get_state_history(_config(thread_id), limit=limit):
        metadata = state.metadata or {}
        checkpoint_id = str(state.config["configurable"].get("checkpoint_id", ""))
        count = counts.get(checkpoint_id)
        rows.append(
            HistoryRow(
                step=int(metadata.get("step", -1)),
                checkpoint_id=checkpoint_id,
                created_at=state.created_at or "",
                message_count=len((state.values or {}).get("messages", [])) if count is None else count,
                next=tuple(state.next),
                source=str(metadata.get("source", "")),
            )
        )
    if not rows:
        raise NotFoundError(f"thread {thread_id!r} does not exist; `remem threads` lists the threads")
    return rows
