"""``UsageRecorder``: the model calls of any graph (a plain ``StateGraph``, ``create_agent`` without
``BudgetMiddleware``) in the ledger from the replies' ``usage_metadata``, each call once, even beside
``BudgetMiddleware`` or remem's agent, on a real SQLite file and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from click.testing import CliRunner
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.graph import START, MessagesState, StateGraph

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
from remem.agent import ledger_of
from remem.cli import main
from remem.middleware import BudgetMiddleware
from remem.strategies import SummaryStrategy
from remem.summarize import LLMSummarizer
from remem.usage import UsageRecorder, ledger_for


def _usage(db_url: str, thread: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["usage", "--db", db_url, "--thread", thread, "--json"])
    assert result.exit_code == 0, result.output
    total: dict[str, Any] = json.loads(result.output)["total"]
    return total


def _paid(messages: list[BaseMessage]) -> tuple[int, int, int]:
    """(calls, input, output tokens) the replies' usage_metadata say were paid."""
    replies = [m for m in messages if isinstance(m, AIMessage)]
    usages = [m.usage_metadata for m in replies if m.usage_metadata]
    assert len(usages) == len(replies)
    return len(usages), sum(u["input_tokens"] for u in usages), sum(u["output_tokens"] for u in usages)


def _shown(total: dict[str, Any]) -> tuple[int, int, int]:
    return total["calls"], total["input_tokens"], total["output_tokens"]


def _plain_graph(model: ScriptedChatModel, saver: Any) -> Any:
    def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("chat", chat)
    graph.add_edge(START, "chat")
    return graph.compile(checkpointer=saver)


def test_a_plain_state_graph_records_nothing_and_the_hint_names_the_recorder(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        _plain_graph(ScriptedChatModel(default="Hi."), saver).invoke(
            {"messages": [("user", "hello")]}, {"configurable": {"thread_id": "T"}}
        )
    result = CliRunner().invoke(main, ["usage", "--db", db_url, "--thread", "T"])
    assert result.exit_code == 0, result.output
    assert "UsageRecorder(ledger_for(saver))" in " ".join(result.output.split())


def test_a_plain_state_graph_with_the_recorder_shows_every_call_and_its_tokens(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        graph = _plain_graph(ScriptedChatModel(default="Sunny, 21 degrees."), saver)
        recorder = UsageRecorder(ledger_for(saver))
        config: Any = {"configurable": {"thread_id": "T"}, "metadata": {"user_id": "maya"}}
        for question in ("Weather?", "And tomorrow?", "Thanks"):
            out = graph.invoke({"messages": [("user", question)]}, {**config, "callbacks": [recorder]})
        graph.invoke({"messages": [("user", "other")]}, {"configurable": {"thread_id": "U"}})  # no recorder
        events = recorder.ledger.events(thread_id="T")
        recorder.ledger.close()
    assert _shown(_usage(db_url, "T")) == _paid(out["messages"]) and _paid(out["messages"])[0] == 3
    assert {(e.user_id, e.node, e.model, e.source, e.turn) for e in events} == {
        ("maya", "chat", "scripted", "provider", None)
    }
    assert _usage(db_url, "U")["calls"] == 0


def test_create_agent_without_budget_middleware_records_through_with_config(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        model = ScriptedChatModel(default="Noted.")
        recorder = UsageRecorder(ledger_for(saver), user_id="ana")
        agent = create_agent(model=model, tools=[], checkpointer=saver).with_config(callbacks=[recorder])
        for question in ("one", "two"):
            out = agent.invoke({"messages": [("user", question)]}, {"configurable": {"thread_id": "A"}})
        users = {e.user_id for e in recorder.ledger.events(thread_id="A")}
        recorder.ledger.close()
    assert _shown(_usage(db_url, "A")) == _paid(out["messages"]) and _paid(out["messages"])[0] == 2
    assert users == {"ana"}


def test_budget_middleware_and_the_recorder_count_each_call_once(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        model = ScriptedChatModel(default="Once.")
        budget = BudgetMiddleware(ledger_for(saver))
        recorder = UsageRecorder(ledger_for(saver))
        agent = create_agent(model=model, tools=[], middleware=[budget], checkpointer=saver)
        for question in ("one", "two", "three"):
            out = agent.invoke(
                {"messages": [("user", question)]},
                {"configurable": {"thread_id": "B"}, "callbacks": [recorder]},
            )
        assert budget.ledger is not None
        turns = [e.turn for e in budget.ledger.events(thread_id="B")]
        recorder.ledger.close()
        budget.ledger.close()
    assert len(model.calls) == 3
    assert _shown(_usage(db_url, "B")) == _paid(out["messages"]) and _paid(out["messages"])[0] == 3
    assert turns == [1, 2, 3]  # the middleware's rows (numbered turns) are the ones kept


def test_remem_agent_and_the_recorder_count_each_call_once(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        model = ScriptedChatModel(default="Agent.")
        agent = build_agent(model, strategy="filter", checkpointer=saver)
        recorder = UsageRecorder(ledger_for(saver))
        for question in ("one", "two"):
            run_turn(agent.with_config(callbacks=[recorder]), "R", question)
        ledger = ledger_of(agent)
        assert ledger is not None
        turns = [e.turn for e in ledger.events(thread_id="R")]
        recorder.ledger.close()
    assert len(model.calls) == 2 and turns == [1, 2]


def test_remem_agent_summariser_calls_and_the_recorder_count_each_call_once(db_url: str) -> None:
    chat, summariser = ScriptedChatModel(default="Reply."), ScriptedChatModel(default="A short summary.")
    with checkpointer_from_url(db_url) as saver:
        agent = build_agent(
            chat,
            strategy=SummaryStrategy(keep=2, trigger_messages=3),
            checkpointer=saver,
            summarizer=LLMSummarizer(summariser),
        )
        recorder = UsageRecorder(ledger_for(saver))
        for question in ("one", "two", "three"):
            run_turn(agent.with_config(callbacks=[recorder]), "S", question)
        ledger = ledger_of(agent)
        assert ledger is not None
        kinds = sorted(e.kind for e in ledger.events(thread_id="S"))
        recorder.ledger.close()
    assert summariser.calls  # the summary ran
    assert kinds == sorted(["chat"] * len(chat.calls) + ["summariser"] * len(summariser.calls))


def test_a_replayed_call_is_recorded_once(db_url: str) -> None:
    # The same reply (same id) reported twice, as a replayed run or a repeated callback would.
    fixed = AIMessage("Same.", id="reply-1")
    model = ScriptedChatModel(replies=[fixed, fixed, AIMessage("New.", id="reply-2")])
    with checkpointer_from_url(db_url) as saver:
        recorder = UsageRecorder(ledger_for(saver))
        config: Any = {"callbacks": [recorder], "metadata": {"thread_id": "P"}}
        for _ in range(3):
            model.invoke("hello", config)
        ids = [e.call_id for e in recorder.ledger.events(thread_id="P")]
        recorder.ledger.close()
    assert ids == ["P:reply-1", "P:reply-2"]


def test_an_async_run_records_too(sqlite_path: Any) -> None:
    url = f"sqlite:///{sqlite_path}"

    async def run() -> list[BaseMessage]:
        with checkpointer_from_url(url) as saver:
            graph = _plain_graph(ScriptedChatModel(default="Async."), saver)
            recorder = UsageRecorder(ledger_for(saver))
            config: Any = {"configurable": {"thread_id": "S"}, "callbacks": [recorder]}
            out = await graph.ainvoke({"messages": [("user", "hi")]}, config)
            recorder.ledger.close()
            return list(out["messages"])

    messages = asyncio.run(run())
    assert _shown(_usage(url, "S")) == _paid(messages) == (1, *_paid(messages)[1:])
