"""A retry after a failure finishes the kept turn instead of adding a copy, and a failed summary after a
paid reply still returns the reply: on remem's agent and on ``create_agent`` with ``BudgetMiddleware``,
through ``run_turn`` and through a plain ``invoke``, on a real SQLite file (and PostgreSQL)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
from remem.agent import SUMMARY_ERROR_KEY, arun_turn, ledger_of, thread_config
from remem.messages import is_retry, retried_copy, unanswered
from remem.middleware import BudgetMiddleware
from remem.strategies import SummaryStrategy
from remem.summarize import LLMSummarizer
from remem.usage import ledger_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url = (
        f"sqlite:///{tmp_path / 'retry.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    with checkpointer_from_url(str(url)) as opened:
        yield opened


def _flaky() -> ScriptedChatModel:
    """A model whose first call fails (a bad key, the endpoint down), then answers."""
    return ScriptedChatModel(replies=[ConnectionError("endpoint down"), "hello to you"], default="more")


def _graph(kind: str, saver: Any, model: ScriptedChatModel) -> tuple[Any, BudgetMiddleware | None]:
    if kind == "agent":
        return build_agent(model, strategy="filter", checkpointer=saver), None
    budget = BudgetMiddleware(ledger_for(saver))
    return create_agent(model=model, tools=[], middleware=[budget], checkpointer=saver), budget


def _messages(graph: Any, thread: str = "k1") -> list[BaseMessage]:
    return list(graph.get_state(thread_config(thread)).values.get("messages", []))


def _calls(kind: str, graph: Any, budget: BudgetMiddleware | None, saver: Any) -> int:
    ledger = ledger_of(graph) if budget is None else budget.ledger
    assert ledger is not None
    return ledger.spent(thread_id="k1").calls


@pytest.mark.parametrize("kind", ["agent", "middleware"])
@pytest.mark.parametrize("how", ["run_turn", "invoke"])
def test_a_retry_of_the_same_message_answers_the_kept_turn_once(kind: str, how: str, saver: Any) -> None:
    model = _flaky()
    graph, budget = _graph(kind, saver, model)

    def say(text: str) -> str:
        if how == "run_turn":
            return run_turn(graph, "k1", text, gate=budget).text
        out = graph.invoke({"messages": [HumanMessage(content=text)]}, thread_config("k1"))
        return str(out["messages"][-1].text)

    with pytest.raises(Exception, match="endpoint down"):
        say("hello")
    assert say("hello") == "hello to you"  # the user fixed the key and sent the same message again
    messages = _messages(graph)
    assert [(m.type, m.text) for m in messages] == [("human", "hello"), ("ai", "hello to you")]
    assert len(model.calls) == 2  # the failed call and the one that answered: no second answer paid
    assert _calls(kind, graph, budget, saver) == 1
    assert say("hello") == "more"  # once answered, the same text again is a new turn
    assert [m.text for m in _messages(graph) if isinstance(m, HumanMessage)] == ["hello", "hello"]


@pytest.mark.parametrize("kind", ["agent", "middleware"])
def test_another_message_after_a_failure_finishes_the_kept_turn_then_answers_it(
    kind: str, saver: Any
) -> None:
    model = _flaky()
    graph, budget = _graph(kind, saver, model)
    with pytest.raises(Exception, match="endpoint down"):
        run_turn(graph, "k1", "hello", gate=budget)
    assert run_turn(graph, "k1", "are you there?", gate=budget).text == "more"
    texts = [m.text for m in _messages(graph)]
    assert texts == ["hello", "hello to you", "are you there?", "more"]


async def test_the_async_turn_retries_the_same_way(saver: Any) -> None:
    model = _flaky()
    graph, _ = _graph("agent", saver, model)
    with pytest.raises(Exception, match="endpoint down"):
        await arun_turn(graph, "k1", "hello")
    assert (await arun_turn(graph, "k1", "hello")).text == "hello to you"
    assert [m.text for m in _messages(graph)] == ["hello", "hello to you"] and len(model.calls) == 2


def test_what_counts_as_a_retry() -> None:
    asked = HumanMessage(content="hello", id="h1")
    assert unanswered([asked]) is asked and is_retry([asked], [HumanMessage(content="hello")])
    assert not is_retry([asked], [HumanMessage(content="hello!")])  # another message
    assert not is_retry([asked, AIMessage(content="hi")], [HumanMessage(content="hello")])  # answered
    assert not is_retry([asked], [HumanMessage(content="hello"), HumanMessage(content="again")])
    call = AIMessage(content="", tool_calls=[{"name": "t", "args": {}, "id": "c1"}])
    assert unanswered([asked, call]) is asked  # a tool round cut short is still the kept turn
    copy = HumanMessage(content="hello", id="h2")
    assert retried_copy([asked, copy]) is copy and retried_copy([asked]) is None
    assert retried_copy([]) is None


# -- a failed summary after a paid reply ---------------------------------------------------------------


def _summarising(saver: Any, summariser: ScriptedChatModel) -> tuple[Any, ScriptedChatModel]:
    chat = ScriptedChatModel(default=lambda messages: f"noted ({len(messages)} messages)")
    agent = build_agent(
        chat,
        strategy=SummaryStrategy(keep=2, trigger_messages=3),
        checkpointer=saver,
        summarizer=LLMSummarizer(summariser),
    )
    return agent, chat


def test_a_failed_summary_still_returns_the_paid_reply(saver: Any, caplog: pytest.LogCaptureFixture) -> None:
    agent, chat = _summarising(saver, ScriptedChatModel(replies=[RuntimeError("down")], default="A summary."))
    run_turn(agent, "t", "first")
    with caplog.at_level(logging.WARNING, logger="remem.agent"):
        reply = run_turn(agent, "t", "second")  # the summary step after this reply fails
    assert reply.text.startswith("noted") and "down" in reply.response_metadata[SUMMARY_ERROR_KEY]
    assert any("summary step after the reply failed" in r.getMessage() for r in caplog.records)
    snapshot = agent.get_state(thread_config("t"))
    assert snapshot.values["messages"][-1].text == reply.text  # kept in the thread
    assert SUMMARY_ERROR_KEY not in snapshot.values["messages"][-1].response_metadata  # not stored
    run_turn(agent, "t", "third")  # runs the summary first, then the turn
    assert len(chat.calls) == 3  # one call per user turn, none repeated
    assert agent.get_state(thread_config("t")).values["summary"] == "A summary."


def test_a_summary_that_keeps_failing_does_not_stop_the_thread(saver: Any) -> None:
    agent, chat = _summarising(
        saver, ScriptedChatModel(replies=[RuntimeError("down")] * 3, default="A summary.")
    )
    run_turn(agent, "t", "first")
    assert SUMMARY_ERROR_KEY in run_turn(agent, "t", "second").response_metadata
    # The kept summary step fails again (skipped, logged), and this turn's own compaction fails too.
    assert SUMMARY_ERROR_KEY in run_turn(agent, "t", "third").response_metadata
    reply = run_turn(agent, "t", "fourth")  # the summariser is back: the thread compacts
    assert SUMMARY_ERROR_KEY not in reply.response_metadata and len(chat.calls) == 4
    values = agent.get_state(thread_config("t")).values
    assert values["summary"] == "A summary." and agent.get_state(thread_config("t")).next == ()


def test_the_memory_thread_stores_a_retried_message_once(saver: Any, tmp_path: Path) -> None:
    from remem import Memory
    from remem.middleware import ContextCardMiddleware

    with Memory.from_url(f"sqlite:///{tmp_path / 'memory.db'}") as memory:
        model = _flaky()
        budget = BudgetMiddleware(ledger_for(saver))
        card = ContextCardMiddleware(memory)
        graph = create_agent(model=model, tools=[], middleware=[card, budget], checkpointer=saver)
        with pytest.raises(ConnectionError):
            graph.invoke({"messages": [HumanMessage(content="hello")]}, thread_config("k1"))
        graph.invoke({"messages": [HumanMessage(content="hello")]}, thread_config("k1"))
        stored = [m.content for m in memory.thread("k1").messages()]
        assert stored == ["hello", "hello to you"]
