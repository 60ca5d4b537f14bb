"""Budgets given for one run, and what a call over a budget does (``budget_action``: error, refuse,
approve, compact), in remem's agent and in ``BudgetMiddleware`` with ``create_agent``, on real SQLite files
and PostgreSQL: nothing is sent past a budget unless a person approved it or the history was compacted to
fit, and the thread keeps every message whichever the action."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

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
from remem.agent import ledger_of, resume_turn
from remem.errors import ArgumentTypeError, RememUsageError
from remem.messages import approximate_token_count, is_provider_valid
from remem.middleware import BudgetMiddleware
from remem.usage import BUDGETS_KEY, Budgets, Price, PriceTable, ledger_for
from remem.usage.approval import is_refusal


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url = (
        f"sqlite:///{tmp_path / 'actions.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    with checkpointer_from_url(str(url)) as opened:
        yield opened


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"the value of {key} is {key.upper()}"


def _echo() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda messages: f"noted ({len(messages)} messages)")


def _agent(saver: Any, model: ScriptedChatModel, action: str, **settings: Any) -> Any:
    # filter with a wide window: the view is the whole history, so only the budget action can cut it
    options = Settings(keep_messages=100, budget_action=action, **settings)
    return build_agent(model, tools=[lookup], strategy="filter", checkpointer=saver, settings=options)


def _humans(agent: Any, thread: str) -> list[str]:
    state = agent.get_state({"configurable": {"thread_id": thread}}).values
    return [m.text for m in state.get("messages", []) if isinstance(m, HumanMessage)]


def _spent_on(agent: Any, saver: Any, thread: str, text: str) -> int:
    """What the thread has spent once ``text`` was answered (a first turn with no budget)."""
    run_turn(build_agent(_echo(), strategy="filter", checkpointer=saver), thread, text)
    ledger = ledger_for(saver)
    spent = ledger.spent(thread_id=thread).tokens
    ledger.close()
    return spent


def test_every_action_is_a_setting_and_a_wrong_one_is_refused() -> None:
    for action in ("error", "refuse", "approve", "compact"):
        assert Settings(budget_action=action).budget_action == action
    with pytest.raises(ConfigError, match="budget_action"):
        Settings(budget_action="shrink")


def test_a_wrong_action_given_directly_is_a_config_error(saver: Any) -> None:
    with pytest.raises(ConfigError, match="use one of error, refuse, approve, compact"):
        build_agent(_echo(), checkpointer=saver, settings=Settings(), budget_action="shrink")
    with pytest.raises(ConfigError, match="REMEM_BUDGET_ACTION"):
        BudgetMiddleware(None, budget_action="maybe")


def test_refuse_ends_the_turn_with_the_budget_named_and_keeps_the_message(saver: Any) -> None:
    spent = _spent_on(None, saver, "t", "one two three")
    model = _echo()
    agent = _agent(saver, model, "refuse", session_token_budget=spent + 5)
    reply = run_turn(agent, "t", "four five six seven eight nine")
    assert model.calls == []  # not sent
    assert is_refusal(reply) and "session_token_budget" in reply.text and "not sent" in reply.text
    assert _humans(agent, "t") == ["one two three", "four five six seven eight nine"]  # nothing lost
    ledger = ledger_of(agent)
    assert ledger is not None and ledger.spent(thread_id="t").tokens == spent  # nothing spent
    # The same budget with the default action raises, before the input is stored.
    strict = _agent(saver, _echo(), "error", session_token_budget=spent + 5)
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        run_turn(strict, "t", "ten eleven")
    assert _humans(agent, "t")[-1] == "four five six seven eight nine"


def test_approve_pauses_with_the_budget_and_sends_only_when_approved(saver: Any) -> None:
    spent = _spent_on(None, saver, "t", "one two three")
    model = _echo()
    agent = _agent(saver, model, "approve", session_token_budget=spent + 5)
    with pytest.raises(ApprovalPendingError) as paused:
        run_turn(agent, "t", "four five six seven eight nine")
    assert "session_token_budget" in paused.value.estimate["over_budget"]
    assert paused.value.estimate["input_tokens"] > 5 and model.calls == []
    refused = resume_turn(agent, "t", False)
    assert is_refusal(refused) and "not approved" in refused.text and model.calls == []
    with pytest.raises(ApprovalPendingError):
        run_turn(agent, "t", "ten eleven twelve")
    approved = resume_turn(agent, "t", True)
    assert len(model.calls) == 1 and approved.text.startswith("noted")
    assert _humans(agent, "t") == ["one two three", "four five six seven eight nine", "ten eleven twelve"]
    ledger = ledger_of(agent)
    assert ledger is not None and ledger.spent(thread_id="t").calls == 2  # the approved call is recorded


def _history_with_a_tool_round(saver: Any) -> None:
    model = ScriptedChatModel(
        replies=[
            "first answer " * 5,
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "k"}, "id": "c1"}]),
            "the value is K " * 5,
            "third answer " * 5,
        ]
    )
    agent = _agent(saver, model, "error")
    for text in ("an opening question " * 4, "look k up for me " * 4, "a third question " * 4):
        run_turn(agent, "t", text)


def test_compact_sends_the_newest_messages_that_fit_and_the_thread_keeps_them_all(
    saver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _history_with_a_tool_round(saver)
    model = _echo()
    limit = 90  # the whole history is far more; the latest question and a little before it fit
    agent = _agent(saver, model, "compact", call_token_budget=limit)
    with caplog.at_level(logging.WARNING, logger="remem.usage"):
        reply = run_turn(agent, "t", "a short last question")
    (sent,) = model.calls
    state = agent.get_state({"configurable": {"thread_id": "t"}}).values
    assert len(sent) < len(state["messages"]) - 1  # a cut was made...
    assert sent[-1].text == "a short last question" and isinstance(sent[0], HumanMessage)
    assert is_provider_valid(sent)  # ...at a point the provider accepts (no orphan tool result)
    ledger = ledger_of(agent)
    assert ledger is not None  # what was recorded as sent (the tool's schema included) fits the budget
    assert ledger.events(thread_id="t")[-1].input_tokens <= limit
    warned = [r for r in caplog.records if "budget_action=compact" in r.getMessage()]
    assert len(warned) == 1  # not silent, and said once (run_turn's check before storing stays quiet)
    assert len(_humans(agent, "t")) == 4 and not is_refusal(reply)  # the thread keeps everything
    assert any(isinstance(m, ToolMessage) for m in state["messages"])
    # The same budget with the default action raises instead.
    with pytest.raises(BudgetExceededError, match="call_token_budget"):
        run_turn(_agent(saver, _echo(), "error", call_token_budget=limit), "t", "a short last question")


def test_compact_raises_when_not_even_the_latest_message_fits_and_stores_nothing(saver: Any) -> None:
    model = _echo()
    agent = _agent(saver, model, "compact", call_token_budget=60)
    with pytest.raises(BudgetExceededError, match="could not fit it either"):
        run_turn(agent, "t", "a question far too long for the budget " * 10)
    assert model.calls == [] and _humans(agent, "t") == []  # refused before the input was stored
    run_turn(agent, "t", "short")  # so the thread is not left waiting on it
    assert len(model.calls) == 1


# -- the middleware ---------------------------------------------------------------------------------


PRICES = PriceTable({"scripted": Price(1.0, 2.0)})


def _middleware_agent(saver: Any, model: ScriptedChatModel, action: str, budgets: Budgets) -> Any:
    budget = BudgetMiddleware(ledger_for(saver), budgets=budgets, prices=PRICES, budget_action=action)
    return create_agent(model=model, tools=[lookup], middleware=[budget], checkpointer=saver)


def _config(thread: str = "m") -> Any:
    return {"configurable": {"thread_id": thread, "user_id": "maya"}}


def _say(agent: Any, text: str) -> dict[str, Any]:
    result: dict[str, Any] = agent.invoke({"messages": [HumanMessage(content=text)]}, _config())
    return result


def test_the_middleware_refuses_with_the_budget_named(saver: Any) -> None:
    model = _echo()
    agent = _middleware_agent(saver, model, "refuse", Budgets(thread_tokens=60))
    _say(agent, "hello there")
    out = _say(agent, "and now a much longer question that passes the thread budget " * 3)
    last = out["messages"][-1]
    assert len(model.calls) == 1 and is_refusal(last) and "session_token_budget" in last.text
    assert [m.text for m in out["messages"] if isinstance(m, HumanMessage)][-1].startswith("and now")


def test_the_middleware_asks_and_sends_only_when_approved(saver: Any) -> None:
    model = _echo()
    agent = _middleware_agent(saver, model, "approve", Budgets(call_tokens=20))
    paused = _say(agent, "a question that passes the call budget of twenty tokens " * 2)
    (pending,) = paused["__interrupt__"]
    assert "call_token_budget" in pending.value["over_budget"] and model.calls == []
    refused = agent.invoke(Command(resume=False), _config())
    assert is_refusal(refused["messages"][-1]) and model.calls == []
    _say(agent, "another question past the call budget of twenty tokens " * 2)
    agent.invoke(Command(resume=True), _config())
    assert len(model.calls) == 1


def test_the_middleware_compacts_to_fit_and_the_thread_keeps_everything(saver: Any) -> None:
    model = _echo()
    budgets = Budgets(call_tokens=120)  # the tool's schema takes about 40 of them
    agent = _middleware_agent(saver, model, "compact", budgets)
    for text in ("first question " * 8, "second question " * 8, "third question " * 8):
        out = _say(agent, text)
    sent: list[BaseMessage] = model.calls[-1]
    assert len(sent) < len(out["messages"]) - 1 and sent[-1].text.startswith("third question")
    assert is_provider_valid(sent) and isinstance(sent[0], HumanMessage)
    assert len([m for m in out["messages"] if isinstance(m, HumanMessage)]) == 3
    ledger = ledger_for(saver)
    assert ledger.spent(thread_id="m").calls == 3
    assert all(e.input_tokens <= 120 for e in ledger.events(thread_id="m"))  # what was sent fits
    ledger.close()
    with pytest.raises(BudgetExceededError, match="could not fit it either"):
        _say(agent, "a question far too long for a hundred and twenty tokens " * 10)


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


def test_run_turn_takes_budgets_for_that_turn(saver: Any) -> None:
    spent = _spent_on(None, saver, "t", "one two three")
    model = _echo()
    agent = _agent(saver, model, "error")  # no budget configured
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        run_turn(agent, "t", "four five six seven eight", budgets={"thread_tokens": spent + 5})
    assert model.calls == [] and _humans(agent, "t") == ["one two three"]  # refused before storing
    run_turn(agent, "t", "four five six seven eight")  # the next turn, without: the agent's (none)
    assert len(model.calls) == 1
    with pytest.raises(BudgetExceededError, match="call_token_budget"):
        run_turn(agent, "t", "nine ten", budgets=Budgets(call_tokens=3))


def test_the_middleware_reads_budgets_from_the_runs_config(saver: Any) -> None:
    model = _echo()
    agent = _middleware_agent(saver, model, "error", Budgets())
    config = {"configurable": {"thread_id": "m", "user_id": "maya", BUDGETS_KEY: {"call_tokens": 5}}}
    with pytest.raises(BudgetExceededError, match="call_token_budget of 5 tokens"):
        agent.invoke({"messages": [HumanMessage(content="a question of more than five tokens")]}, config)
    assert model.calls == []
    _say(agent, "the same question without the run's budget")
    assert len(model.calls) == 1


# -- the properties ----------------------------------------------------------------------------------


def test_compacting_any_history_keeps_it_valid_and_within_the_room() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from remem.usage.breach import fit_messages
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


async def test_the_async_paths_act_the_same_way(saver: Any) -> None:
    from remem.agent import arun_turn

    model = _echo()
    agent = _agent(saver, model, "refuse")
    reply = await arun_turn(agent, "a", "a question past the run's call budget", budgets={"call_tokens": 3})
    assert is_refusal(reply) and "call_token_budget" in reply.text and model.calls == []
    middleware = _middleware_agent(saver, model, "refuse", Budgets(call_tokens=3))
    out = await middleware.ainvoke({"messages": [HumanMessage(content="another question")]}, _config())
    assert is_refusal(out["messages"][-1]) and model.calls == []


def test_a_paused_turn_keeps_its_own_budgets_for_the_answer(saver: Any) -> None:
    model = _echo()
    agent = _agent(saver, model, "approve")  # no budget configured: only the run's
    with pytest.raises(ApprovalPendingError) as paused:
        run_turn(agent, "t", "a question past the run's call budget", budgets={"call_tokens": 3})
    assert paused.value.estimate["run_budgets"] == {"call_tokens": 3}
    refused = resume_turn(agent, "t", False)  # no budgets given: the pause's own apply, so "no" holds
    assert is_refusal(refused) and model.calls == []
    with pytest.raises(ApprovalPendingError):
        run_turn(agent, "t", "another question past it", budgets=Budgets(call_tokens=3))
    resume_turn(agent, "t", True)
    assert len(model.calls) == 1


def test_the_middleware_pause_carries_the_runs_budgets_to_resume_with(saver: Any) -> None:
    model = _echo()
    agent = _middleware_agent(saver, model, "approve", Budgets())
    config = {"configurable": {"thread_id": "m", "user_id": "maya", BUDGETS_KEY: {"call_tokens": 3}}}
    paused = agent.invoke({"messages": [HumanMessage(content="a question past the call budget")]}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value["run_budgets"] == {"call_tokens": 3}
    again = {"configurable": {**_config()["configurable"], BUDGETS_KEY: pending.value["run_budgets"]}}
    refused = agent.invoke(Command(resume=False), again)
    assert is_refusal(refused["messages"][-1]) and model.calls == []


def test_refusal_notes_are_never_sent_to_the_model(saver: Any) -> None:
    model = _echo()
    agent = _middleware_agent(saver, model, "refuse", Budgets())
    tight = {"configurable": {**_config()["configurable"], BUDGETS_KEY: {"call_tokens": 5}}}
    out = agent.invoke({"messages": [HumanMessage(content="a question past five tokens")]}, tight)
    assert is_refusal(out["messages"][-1]) and model.calls == []
    _say(agent, "short")  # no budget for this run
    (sent,) = model.calls
    assert [m.text for m in sent] == ["a question past five tokens", "short"]  # the note is not in it
    assert any(is_refusal(m) for m in agent.get_state(_config()).values["messages"])  # kept in the thread


def test_a_check_made_with_other_budgets_is_not_reused(saver: Any) -> None:
    from remem.agent import _TURN_RULES, _Caller

    spent = _spent_on(None, saver, "t", "one two three")
    agent = _agent(saver, _echo(), "error")
    nodes = _TURN_RULES[agent].nodes
    assert nodes is not None
    state = agent.get_state({"configurable": {"thread_id": "t"}}).values
    state = {**state, "messages": [*state["messages"], HumanMessage(content="four five six", id="h2")]}
    nodes.precheck(state, _Caller("t", None, {"thread_tokens": 10**6}))  # a run that then failed
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        run_turn(
            agent, "t", HumanMessage(content="four five six", id="h2"), budgets={"thread_tokens": spent + 2}
        )
