"""Budgets given for one run, and what a call over a budget does (``budget_action``: error, refuse,
approve, compact), written once and run over both paths that drive the one gate (``remem.usage._gate``):
remem's agent (``build_agent``) and ``create_agent`` with ``BudgetMiddleware``, each through ``run_turn``
(the middleware passed as ``gate=``), on real SQLite files and PostgreSQL. Nothing is sent past a budget
unless a person approved it or the history was compacted to fit; a refused input leaves nothing in the
thread; every other action keeps every message; a breach found after a call keeps the reply."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from remem import (
    ApprovalPendingError,
    BudgetExceededError,
    ConfigError,
    ScriptedChatModel,
    Settings,
    build_agent,
    checkpointer_from_url,
    run_turn,
)
from remem.agent import arun_turn, resume_turn
from remem.errors import ArgumentTypeError, RememUsageError
from remem.messages import approximate_token_count, is_provider_valid, is_refusal
from remem.middleware import BudgetMiddleware
from remem.usage import BUDGETS_KEY, Budgets, Ledger, ledger_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url = (
        f"sqlite:///{tmp_path / 'actions.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    with checkpointer_from_url(str(url)) as opened:
        yield opened


@pytest.fixture
def ledger(saver: Any) -> Iterator[Ledger]:
    with ledger_for(saver) as opened:
        yield opened


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"the value of {key} is {key.upper()}"


def _echo() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda messages: f"noted ({len(messages)} messages)")


@dataclass
class GatePath:
    """One of the two paths, built on a saver: an agent whose model calls pass the gate, and the turn."""

    kind: str
    saver: Any
    ledger: Ledger

    def agent(self, model: ScriptedChatModel, action: str = "error", budgets: Budgets | None = None) -> Agent:
        if self.kind == "agent":
            # filter with a wide window: the view is the whole history, so only the budget action cuts it
            graph = build_agent(
                model,
                tools=[lookup],
                strategy="filter",
                checkpointer=self.saver,
                settings=Settings(keep_messages=100),
                budgets=budgets or Budgets(),
                budget_action=action,
                ledger=self.ledger,
            )
            return Agent(graph, None)
        budget = BudgetMiddleware(self.ledger, budgets=budgets or Budgets(), budget_action=action)
        graph = create_agent(model=model, tools=[lookup], middleware=[budget], checkpointer=self.saver)
        return Agent(graph, budget)


@dataclass
class Agent:
    graph: Any
    gate: BudgetMiddleware | None

    def say(self, text: Any, thread: str = "t", **kwargs: Any) -> AIMessage:
        return run_turn(self.graph, thread, text, gate=self.gate, **kwargs)

    async def asay(self, text: str, thread: str = "t", **kwargs: Any) -> AIMessage:
        return await arun_turn(self.graph, thread, text, gate=self.gate, **kwargs)

    def answer(self, approved: bool, thread: str = "t") -> AIMessage:
        return resume_turn(self.graph, thread, approved)

    def messages(self, thread: str = "t") -> list[BaseMessage]:
        values = self.graph.get_state({"configurable": {"thread_id": thread}}).values
        return list(values.get("messages", []))

    def humans(self, thread: str = "t") -> list[str]:
        return [m.text for m in self.messages(thread) if isinstance(m, HumanMessage)]


@pytest.fixture(params=["agent", "middleware"])
def path(request: pytest.FixtureRequest, saver: Any, ledger: Ledger) -> GatePath:
    return GatePath(request.param, saver, ledger)


def _spent_on(path: GatePath, thread: str, text: str) -> int:
    """What the thread has spent once ``text`` was answered (a first turn with no budget)."""
    path.agent(_echo()).say(text, thread)
    return path.ledger.spent(thread_id=thread).tokens


def test_every_action_is_a_setting_and_a_wrong_one_is_refused() -> None:
    for action in ("error", "refuse", "approve", "compact"):
        assert Settings(budget_action=action).budget_action == action
    with pytest.raises(ConfigError, match="budget_action"):
        Settings(budget_action="shrink")


def test_a_wrong_action_given_directly_is_a_config_error(path: GatePath) -> None:
    with pytest.raises(
        ConfigError, match=r"use one of error, refuse, approve, compact \(REMEM_BUDGET_ACTION"
    ):
        path.agent(_echo(), "shrink")


def test_refuse_ends_the_turn_with_the_budget_named_and_keeps_the_message(path: GatePath) -> None:
    spent = _spent_on(path, "t", "one two three")
    model = _echo()
    agent = path.agent(model, "refuse", Budgets(thread_tokens=spent + 5))
    reply = agent.say("four five six seven eight nine")
    assert model.calls == []  # not sent
    assert is_refusal(reply) and "session_token_budget" in reply.text and "not sent" in reply.text
    assert agent.humans() == ["one two three", "four five six seven eight nine"]  # nothing lost
    assert path.ledger.spent(thread_id="t").tokens == spent  # nothing spent


def test_error_refuses_the_input_before_it_is_stored(path: GatePath) -> None:
    spent = _spent_on(path, "t", "one two three")
    model = _echo()
    strict = path.agent(model, "error", Budgets(thread_tokens=spent + 1))
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        strict.say("ten eleven")
    assert model.calls == [] and strict.humans() == ["one two three"]  # a refused input leaves nothing
    assert path.ledger.spent(thread_id="t").tokens == spent
    path.agent(model).say("ten eleven")  # the thread is not left waiting on it
    assert strict.humans() == ["one two three", "ten eleven"] and len(model.calls) == 1


def test_approve_pauses_with_the_budget_and_sends_only_when_approved(path: GatePath) -> None:
    spent = _spent_on(path, "t", "one two three")
    model = _echo()
    agent = path.agent(model, "approve", Budgets(thread_tokens=spent + 5))
    with pytest.raises(ApprovalPendingError) as paused:
        agent.say("four five six seven eight nine")
    assert "session_token_budget" in paused.value.estimate["over_budget"]
    assert paused.value.estimate["input_tokens"] > 5 and model.calls == []
    refused = agent.answer(False)
    assert is_refusal(refused) and "not approved" in refused.text and model.calls == []
    with pytest.raises(ApprovalPendingError):
        agent.say("ten eleven twelve")
    approved = agent.answer(True)
    assert len(model.calls) == 1 and approved.text.startswith("noted")
    assert agent.humans() == ["one two three", "four five six seven eight nine", "ten eleven twelve"]
    assert path.ledger.spent(thread_id="t").calls == 2  # the approved call is recorded


def _history_with_a_tool_round(path: GatePath) -> None:
    model = ScriptedChatModel(
        replies=[
            "first answer " * 5,
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "k"}, "id": "c1"}]),
            "the value is K " * 5,
            "third answer " * 5,
        ]
    )
    agent = path.agent(model)
    for text in ("an opening question " * 4, "look k up for me " * 4, "a third question " * 4):
        agent.say(text)


def test_compact_sends_the_newest_messages_that_fit_and_the_thread_keeps_them_all(
    path: GatePath, caplog: pytest.LogCaptureFixture
) -> None:
    _history_with_a_tool_round(path)
    model = _echo()
    limit = 90  # the whole history is far more; the latest question and a little before it fit
    agent = path.agent(model, "compact", Budgets(call_tokens=limit))
    with caplog.at_level(logging.WARNING, logger="remem.usage"):
        reply = agent.say("a short last question")
    (sent,) = model.calls
    messages = agent.messages()
    assert len(sent) < len(messages) - 1  # a cut was made...
    assert sent[-1].text == "a short last question" and isinstance(sent[0], HumanMessage)
    assert is_provider_valid(sent)  # ...at a point the provider accepts (no orphan tool result)
    # what was recorded as sent (the tool's schema included) fits the budget
    assert path.ledger.events(thread_id="t")[-1].input_tokens <= limit
    warned = [r for r in caplog.records if "budget_action=compact" in r.getMessage()]
    assert len(warned) == 1  # not silent, and said once (run_turn's check before storing stays quiet)
    assert len(agent.humans()) == 4 and not is_refusal(reply)  # the thread keeps everything
    assert any(isinstance(m, ToolMessage) for m in messages)
    # The same budget with the default action raises instead.
    strict = path.agent(_echo(), "error", Budgets(call_tokens=limit))
    with pytest.raises(BudgetExceededError, match="call_token_budget"):
        strict.say("a short last question")


def test_compact_raises_when_not_even_the_latest_message_fits_and_stores_nothing(path: GatePath) -> None:
    model = _echo()
    agent = path.agent(model, "compact", Budgets(call_tokens=60))
    with pytest.raises(BudgetExceededError, match="could not fit it either"):
        agent.say("a question far too long for the budget " * 10)
    assert model.calls == [] and agent.humans() == []  # refused before the input was stored
    path.agent(model).say("short")  # so the thread is not left waiting on it
    assert len(model.calls) == 1


def test_a_breach_only_the_providers_numbers_show_keeps_the_paid_reply(
    path: GatePath, caplog: pytest.LogCaptureFixture
) -> None:
    class Heavy(ScriptedChatModel):
        def _next_reply(self, messages: list[BaseMessage]) -> AIMessage:
            usage = {"input_tokens": 5000, "output_tokens": 10, "total_tokens": 5010}
            return super()._next_reply(messages).model_copy(update={"usage_metadata": usage})

    model = Heavy(default="OK.")
    agent = path.agent(model, "error", Budgets(thread_tokens=1000))
    with caplog.at_level(logging.WARNING, logger="remem.usage"):
        reply = agent.say("hi")
    assert reply.text == "OK." and agent.messages()[-1].text == "OK."  # returned and kept: it was paid for
    assert any("as the provider reported it" in r.getMessage() for r in caplog.records)  # not silent
    assert path.ledger.spent(thread_id="t").tokens == 5010  # paid, so it is in the ledger
    with pytest.raises(BudgetExceededError, match="session_token_budget"):  # the next call meets it
        agent.say("and now?")
    assert len(model.calls) == 1 and agent.humans() == ["hi"]


# -- budgets for one run ----------------------------------------------------------------------------


def test_budgets_for_one_run_go_over_the_configured_ones() -> None:
    configured = Budgets(turn_tokens=100, thread_cost=2.0)
    assert configured.merged(None) is configured
    assert configured.merged(Budgets(turn_cost=0.05)) == Budgets(
        turn_tokens=100, turn_cost=0.05, thread_cost=2.0
    )
    assert configured.merged({"turn_tokens": 10}) == Budgets(turn_tokens=10, thread_cost=2.0)
    assert configured.merged({"thread_cost": None}) == Budgets(turn_tokens=100)  # None lifts it for the run
    with pytest.raises(RememUsageError, match=r"unknown budget turn_dollars.*turn_cost"):
        configured.merged({"turn_dollars": 1})
    for wrong in ({"turn_cost": "a lot"}, {"turn_cost": -1}, {"turn_tokens": True}):
        with pytest.raises(ArgumentTypeError, match="a number of 0 or more"):
            configured.merged(wrong)
    with pytest.raises(ArgumentTypeError, match="takes a Budgets or a mapping"):
        configured.merged(42)


def test_run_turn_takes_budgets_for_that_turn(path: GatePath) -> None:
    spent = _spent_on(path, "t", "one two three")
    model = _echo()
    agent = path.agent(model)  # no budget configured
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        agent.say("four five six seven eight", budgets={"thread_tokens": spent + 1})
    assert model.calls == [] and agent.humans() == ["one two three"]  # refused before storing
    agent.say("four five six seven eight")  # the next turn, without: the agent's (none)
    assert len(model.calls) == 1
    with pytest.raises(BudgetExceededError, match="call_token_budget"):
        agent.say("nine ten", budgets=Budgets(call_tokens=3))


def test_a_plain_invoke_reads_budgets_from_the_runs_config(path: GatePath) -> None:
    model = _echo()
    graph = path.agent(model).graph  # both paths read a plain invoke's configurable the same way
    config = {"configurable": {"thread_id": "m", "user_id": "maya", BUDGETS_KEY: {"call_tokens": 5}}}
    with pytest.raises(BudgetExceededError, match="call_token_budget of 5 tokens"):
        graph.invoke({"messages": [HumanMessage(content="a question of more than five tokens")]}, config)
    assert model.calls == []
    graph.invoke(
        {"messages": [HumanMessage(content="the same question")]}, {"configurable": {"thread_id": "m"}}
    )
    assert len(model.calls) == 1


async def test_the_async_paths_act_the_same_way(path: GatePath) -> None:
    model = _echo()
    agent = path.agent(model, "refuse")
    reply = await agent.asay("a question past the run's call budget", budgets={"call_tokens": 3})
    assert is_refusal(reply) and "call_token_budget" in reply.text and model.calls == []
    strict = path.agent(model, "error")
    with pytest.raises(BudgetExceededError, match="call_token_budget"):
        await strict.asay("another question", thread="u", budgets={"call_tokens": 3})
    assert strict.humans("u") == []


def test_a_paused_turn_keeps_its_own_budgets_for_the_answer(path: GatePath) -> None:
    model = _echo()
    agent = path.agent(model, "approve")  # no budget configured: only the run's
    with pytest.raises(ApprovalPendingError) as paused:
        agent.say("a question past the run's call budget", budgets={"call_tokens": 3})
    assert paused.value.estimate["run_budgets"] == {"call_tokens": 3}
    refused = agent.answer(False)  # no budgets given: the pause's own apply, so "no" holds
    assert is_refusal(refused) and model.calls == []
    with pytest.raises(ApprovalPendingError):
        agent.say("another question past it", budgets=Budgets(call_tokens=3))
    agent.answer(True)
    assert len(model.calls) == 1


def test_refusal_notes_are_never_sent_to_the_model(path: GatePath) -> None:
    model = _echo()
    agent = path.agent(model, "refuse")
    assert is_refusal(agent.say("a question past five tokens", budgets={"call_tokens": 5}))
    assert model.calls == []
    agent.say("short")  # no budget for this run
    (sent,) = model.calls
    assert [m.text for m in sent] == ["a question past five tokens", "short"]  # the note is not in it
    assert any(is_refusal(m) for m in agent.messages())  # kept in the thread


def test_a_check_made_with_other_budgets_is_not_reused(path: GatePath) -> None:
    spent = _spent_on(path, "t", "one two three")
    agent = path.agent(_echo())
    # A turn checked under generous budgets for its run, whose run then failed before its call...
    values = agent.graph.get_state({"configurable": {"thread_id": "t"}}).values
    message = HumanMessage(content="four five six", id="h2")
    if agent.gate is None:
        from remem.agent import TURN_RULES_ATTRIBUTE

        precheck = getattr(agent.graph, TURN_RULES_ATTRIBUTE).precheck
    else:
        precheck = agent.gate.precheck
    precheck(values, [message], {"configurable": {"thread_id": "t", BUDGETS_KEY: {"thread_tokens": 10**6}}})
    # ...does not let the same call through the next run's budgets.
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        agent.say(message, budgets={"thread_tokens": spent + 2})


# -- the properties ----------------------------------------------------------------------------------


def test_compacting_any_history_keeps_it_valid_and_within_the_room() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from remem.usage._breach import fit_messages
    from tests.histories import histories

    cases = {"fitted": 0, "cut": 0, "none": 0}

    @settings(max_examples=300, deadline=None)
    @given(histories(min_turns=1), st.integers(0, 600))
    def check(history: list[BaseMessage], room: int) -> None:
        fitted = fit_messages(history, room, approximate_token_count)
        if fitted is None:  # only when the latest user message (and the system messages) cannot fit
            cases["none"] += 1
            latest = max(i for i, m in enumerate(history) if isinstance(m, HumanMessage))
            system = [m for m in history if m.type == "system"]
            assert approximate_token_count([*system, *history[latest:]]) > room or room < 1
            return
        cases["fitted"] += 1
        cases["cut"] += len(fitted) < len(history)
        assert approximate_token_count(fitted) <= room
        assert is_provider_valid(fitted)
        rest = [m for m in fitted if m.type != "system"]
        assert rest and isinstance(rest[0], HumanMessage)
        assert rest == history[len(history) - len(rest) :]  # the newest messages, in order

    check()
    # Each outcome was reached (a property that only ever saw one would check little).
    assert cases["none"] > 0 and cases["cut"] > 0 and cases["fitted"] > cases["cut"]
