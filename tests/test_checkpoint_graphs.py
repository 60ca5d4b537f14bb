"""Differential tests: real LangGraph graphs on remem's savers and on InMemorySaver give the same state.

Each scenario runs once through a saver that writes every checkpoint to both InMemorySaver and a remem
saver (so checkpoint ids, task ids and timestamps are the same), then ``get_state`` (with subgraphs)
and the whole ``get_state_history`` read back from remem must equal InMemorySaver's. Each scenario also
runs on the remem saver alone, reading its own checkpoints as it goes (resume, update_state, forks).
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from remem.checkpoint import AsyncPostgresSaver, AsyncSqliteSaver
from tests.savers import open_saver


class TeeSaver(BaseCheckpointSaver[Any]):
    """Writes to both savers, reads from the first: the two then hold the very same checkpoints."""

    def __init__(self, primary: BaseCheckpointSaver[Any], secondary: BaseCheckpointSaver[Any]) -> None:
        super().__init__()
        self.primary, self.secondary = primary, secondary

    def get_tuple(self, config: RunnableConfig) -> Any:
        return self.primary.get_tuple(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[Any]:
        return self.primary.list(config, **kwargs)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        # LangGraph may still be mutating these objects in another thread (add_messages gives ids to
        # messages in place), so both savers get one copy taken now.
        checkpoint = copy.deepcopy(checkpoint)
        self.secondary.put(config, checkpoint, metadata, new_versions)
        return self.primary.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        writes = copy.deepcopy(writes)
        self.secondary.put_writes(config, writes, task_id, task_path)
        self.primary.put_writes(config, writes, task_id, task_path)

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return self.primary.get_next_version(current, channel)


def _last_human(state: MessagesState) -> HumanMessage:
    return next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))


def _reply(state: MessagesState) -> dict[str, Any]:
    human = _last_human(state)
    return {"messages": [AIMessage(f"you said: {human.content}", id=f"ai-{human.id}")]}


def plain_graph() -> StateGraph[Any]:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


class SummaryState(MessagesState):
    summary: str
    turns: Annotated[int, operator.add]


def summary_graph() -> StateGraph[Any]:
    def summarise(state: SummaryState) -> dict[str, Any]:
        old = state["messages"][:-2]
        if len(state["messages"]) <= 6:
            return {"turns": 1}
        text = " | ".join(str(m.content) for m in old)
        return {
            "summary": (state.get("summary", "") + " || " + text).strip(" |"),
            "messages": [RemoveMessage(id=str(m.id)) for m in old],
            "turns": 1,
        }

    builder = StateGraph(SummaryState)
    builder.add_node("reply", _reply)
    builder.add_node("summarise", summarise)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "summarise")
    builder.add_edge("summarise", END)
    return builder


@tool
def lookup(q: str) -> str:
    """Look a word up."""
    return f"found {q.upper()}"


def tools_graph() -> StateGraph[Any]:
    def agent(state: MessagesState) -> dict[str, Any]:
        human, last = _last_human(state), state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(f"answer: {last.content}", id=f"ai-{human.id}")]}
        call = {"name": "lookup", "args": {"q": str(human.content)}, "id": f"call-{human.id}"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-call-{human.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


def subgraph_graph() -> StateGraph[Any]:
    inner = StateGraph(MessagesState)
    inner.add_node("reply", _reply)
    inner.add_node("echo", lambda s: {"messages": [AIMessage("inner echo", id=f"echo-{_last_human(s).id}")]})
    inner.add_edge(START, "reply")
    inner.add_edge("reply", "echo")
    builder = StateGraph(MessagesState)
    builder.add_node("inner", inner.compile())
    builder.add_edge(START, "inner")
    builder.add_edge("inner", END)
    return builder


def interrupt_graph() -> StateGraph[Any]:
    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": f"send {_last_human(state).content}?"})
        return {"messages": [AIMessage(f"sent: {answer}", id=f"ai-{_last_human(state).id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


def _human(i: int, text: str | None = None) -> dict[str, Any]:
    return {"messages": [HumanMessage(text or f"message number {i}", id=f"h-{i}")]}


Step = Callable[[Any, RunnableConfig], None]


def _chat(turns: int) -> list[Step]:
    return [lambda g, c, i=i: g.invoke(_human(i), c) for i in range(turns)]


def _fork_and_edit() -> list[Step]:
    def fork(g: Any, c: RunnableConfig) -> None:
        history = list(g.get_state_history(c))
        second_turn = next(s for s in history if s.metadata["step"] == 4)
        g.invoke(_human(90, "a forked question"), second_turn.config)

    def edit(g: Any, c: RunnableConfig) -> None:
        g.update_state(c, {"messages": [HumanMessage("edited by id", id="h-1")]})
        g.update_state(c, {"messages": [RemoveMessage(id="ai-h-0")]})

    def replay(g: Any, c: RunnableConfig) -> None:
        before_reply = next(s for s in g.get_state_history(c) if s.next == ("reply",))
        g.invoke(None, before_reply.config)

    return [*_chat(3), fork, edit, lambda g, c: g.invoke(_human(91), c), replay]


def _interrupts() -> list[Step]:
    return [
        lambda g, c: g.invoke(_human(0), c),
        lambda g, c: g.invoke(Command(resume="yes"), c),
        lambda g, c: g.invoke(_human(1), c),
        lambda g, c: g.invoke(Command(resume="no"), c),
        lambda g, c: g.invoke(_human(2), c),
    ]


SCENARIOS: dict[str, tuple[Callable[[], StateGraph[Any]], list[Step]]] = {
    "plain": (plain_graph, _chat(12)),
    "summary": (summary_graph, _chat(10)),
    "tools": (tools_graph, _chat(4)),
    "subgraph": (subgraph_graph, _chat(4)),
    "interrupt": (interrupt_graph, _interrupts()),
    "fork": (plain_graph, _fork_and_edit()),
}


KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _strip_ids(values: dict[str, Any]) -> dict[str, Any]:
    def plain(v: Any) -> Any:
        if isinstance(v, BaseMessage):
            return {k: x for k, x in v.model_dump().items() if k != "id" or not str(x).count("-") > 3}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return {k: plain(v) for k, v in values.items()}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kind", KINDS)
def test_same_state_and_history_as_in_memory(
    scenario: str, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    make, steps = SCENARIOS[scenario]
    config: RunnableConfig = {"configurable": {"thread_id": f"t-{scenario}"}}
    with open_saver(kind, tmp_path, request) as saver:
        memory = InMemorySaver()
        tee = make().compile(checkpointer=TeeSaver(memory, saver))
        for step in steps:
            step(tee, config)
        on_memory = make().compile(checkpointer=memory)
        on_remem = make().compile(checkpointer=saver)
        assert on_remem.get_state(config, subgraphs=True) == on_memory.get_state(config, subgraphs=True)
        remem_history = list(on_remem.get_state_history(config))
        memory_history = list(on_memory.get_state_history(config))
        assert len(remem_history) == len(memory_history) > 3
        for ours, theirs in zip(remem_history, memory_history, strict=True):
            assert ours == theirs

        # The same steps on the remem saver alone, reading its own checkpoints as it goes.
        alone: RunnableConfig = {"configurable": {"thread_id": f"alone-{scenario}"}}
        memory_alone: RunnableConfig = {"configurable": {"thread_id": f"alone-{scenario}"}}
        for step in steps:
            step(on_remem, alone)
            step(on_memory, memory_alone)
        ours_state, theirs_state = on_remem.get_state(alone), on_memory.get_state(memory_alone)
        assert _strip_ids(ours_state.values) == _strip_ids(theirs_state.values)
        assert ours_state.next == theirs_state.next
        assert len(list(on_remem.get_state_history(alone))) == len(
            list(on_memory.get_state_history(memory_alone))
        )


ASYNC_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_savers_run_graphs(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "async"}}
    memory = interrupt_graph().compile(checkpointer=InMemorySaver())
    if kind == "sqlite":
        opened: Any = AsyncSqliteSaver.from_conn_string(tmp_path / "cp.db")
    else:
        opened = AsyncPostgresSaver.from_conn_string(request.getfixturevalue("pg_url"))
    async with opened as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        for i, resume in enumerate(["yes", "no", "maybe"]):
            for g in (graph, memory):
                await g.ainvoke(_human(i), config)
                assert (await g.aget_state(config)).interrupts
                await g.ainvoke(Command(resume=resume), config)
        ours, theirs = await graph.aget_state(config), await memory.aget_state(config)
        assert ours.values == theirs.values
        assert [s.metadata async for s in graph.aget_state_history(config)] == [
            s.metadata async for s in memory.aget_state_history(config)
        ]
