"""The agent and the usage ledger, on real SQLite files and PostgreSQL: every model call is one row in the
thread's own database, budgets read what the ledger says was spent, legacy checkpoints that carry a usage
list still load, and a turn resumed after a failure never repeats a model call that had succeeded."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from remem import (
    BudgetExceededError,
    LLMSummarizer,
    ModelError,
    ScriptedChatModel,
    Settings,
    SummarizationError,
    SummaryStrategy,
    build_agent,
    checkpointer_from_url,
    run_turn,
)
from remem.agent import ledger_of, thread_config
from remem.messages import approximate_token_count
from remem.usage import open_ledger


@pytest.fixture
def saver(db_url: str) -> Iterator[Any]:
    with checkpointer_from_url(db_url) as opened:
        yield opened


def echo() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda messages: f"noted ({len(messages)} messages)")


def lookup_tool() -> tuple[Any, list[str]]:
    seen: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        seen.append(key)
        return f"value of {key}"

    return lookup, seen


def call(key: str, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": key}, "id": call_id}])


def test_every_call_is_a_row_in_the_threads_own_database(db_url: str, saver: Any) -> None:
    lookup, _ = lookup_tool()
    model = ScriptedChatModel(replies=[call("a", "c1"), "a is known", "plain"])
    agent = build_agent(model, tools=[lookup], strategy="filter", checkpointer=saver)
    run_turn(agent, "t1", "what is a?", user_id="maya")
    run_turn(agent, "t1", "thanks", user_id="maya")
    with open_ledger(db_url) as ledger:  # another connection to the same database
        rows = ledger.events(thread_id="t1")
    assert [(r.kind, r.turn, r.node, r.user_id) for r in rows] == [
        ("chat", 1, "call_model", "maya"),
        ("chat", 1, "call_model", "maya"),
        ("chat", 2, "call_model", "maya"),
    ]
    assert [r.input_tokens for r in rows] == [m.usage_metadata["input_tokens"] for m in _replies(agent, "t1")]
    values = agent.get_state(thread_config("t1")).values
    assert values["remem_turn"] == 2 and "usage" not in values


def _replies(agent: Any, thread: str) -> list[Any]:
    return [m for m in agent.get_state(thread_config(thread)).values["messages"] if isinstance(m, AIMessage)]


def test_the_thread_budget_counts_what_earlier_runs_spent(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        run_turn(build_agent(echo(), strategy="filter", checkpointer=saver), "t", "one two three")
    with open_ledger(db_url) as ledger:
        spent = ledger.spent(thread_id="t").tokens
    # A new process (a new saver, a new agent): the budget reads the ledger, not a list in memory.
    settings = Settings(session_token_budget=spent + 5)
    model = echo()
    with checkpointer_from_url(db_url) as saver:
        agent = build_agent(model, strategy="filter", checkpointer=saver, settings=settings)
        with pytest.raises(BudgetExceededError, match="session_token_budget") as raised:
            run_turn(agent, "t", "four five six seven")
    assert model.calls == []  # refused before the call
    assert raised.value.budget == "session_token_budget" and raised.value.limit == spent + 5


def test_a_users_daily_cost_budget_spans_threads(db_url: str, saver: Any) -> None:
    settings = Settings(prices=(("scripted", 1000.0, 1000.0, None),), user_day_cost_budget=0.2)
    model = echo()
    agent = build_agent(model, strategy="filter", checkpointer=saver, settings=settings)
    run_turn(agent, "a", "hello there", user_id="maya")  # about 0.03 at 1000 per million tokens
    run_turn(agent, "b", "hello again", user_id="maya")
    ledger = ledger_of(agent)
    assert ledger is not None
    cost = ledger.user_day("maya").cost
    assert 0 < cost < 0.2
    with pytest.raises(BudgetExceededError, match="user_day_cost_budget"):
        for i in range(20):
            run_turn(agent, f"c{i}", "x " * 40, user_id="maya")
    day = ledger.user_day("maya")
    assert day.calls == len(model.calls) < 20  # every paid call is in the ledger
    # The estimate cannot know the reply's length: a reply may take the day past the budget; it is kept
    # (paid for), and no call is sent after it.
    calls = len(model.calls)
    with pytest.raises(BudgetExceededError, match="user_day_cost_budget"):
        run_turn(agent, "e", "hi", user_id="maya")
    assert len(model.calls) == calls
    run_turn(agent, "d", "hello", user_id="lea")  # another user is not affected


def test_the_turn_budget_counts_every_call_of_a_tool_loop(saver: Any) -> None:
    lookup, seen = lookup_tool()
    model = ScriptedChatModel(replies=[call("a", "c1"), call("b", "c2"), call("c", "c3"), "done"])
    agent = build_agent(
        model, tools=[lookup], strategy="filter", checkpointer=saver, settings=Settings(turn_token_budget=150)
    )
    with pytest.raises(BudgetExceededError, match="this turn would need"):
        run_turn(agent, "t", "look a, b and c up " + "please " * 10)
    ledger = ledger_of(agent)
    assert ledger is not None
    assert 0 < ledger.spent(thread_id="t", turn=1).tokens <= 150
    assert 1 <= len(seen) < 3  # the loop was stopped before a call that would pass the budget


def test_a_reply_without_provider_usage_is_recorded_as_its_estimate_counted_it(saver: Any) -> None:
    class Unreported(ScriptedChatModel):
        def _next_reply(self, messages: list[BaseMessage]) -> AIMessage:
            return super()._next_reply(messages).model_copy(update={"usage_metadata": None})

    lookup, _ = lookup_tool()

    def agent(budget: int) -> Any:
        settings = Settings(turn_token_budget=budget)
        return build_agent(
            Unreported(), tools=[lookup], strategy="filter", checkpointer=saver, settings=settings
        )

    with pytest.raises(BudgetExceededError) as caught:  # a budget of 1 token gives the estimate
        run_turn(agent(1), "probe", "hello there")
    roomy, unbudgeted = agent(10**6), agent(0)  # the row is the same with a budget and without (0)
    run_turn(roomy, "t", "hello there")
    run_turn(unbudgeted, "u", "hello there")
    ledger = ledger_of(roomy)
    assert ledger is not None
    rows = ledger.events(thread_id="t") + ledger.events(thread_id="u")
    assert [(r.source, r.input_tokens) for r in rows] == [("counted", caught.value.amount)] * 2
    assert rows[0].input_tokens > approximate_token_count([HumanMessage("hello there")])  # the tool schemas


def test_an_unpriced_model_is_recorded_with_cost_null(saver: Any) -> None:
    agent = build_agent(echo(), strategy="filter", checkpointer=saver)
    run_turn(agent, "t", "hello")
    ledger = ledger_of(agent)
    assert ledger is not None
    (row,) = ledger.events(thread_id="t")
    assert row.cost is None and ledger.totals()[0].unpriced == 1


def test_ledger_false_records_nothing(saver: Any, db_url: str) -> None:
    agent = build_agent(echo(), strategy="filter", checkpointer=saver, ledger=False)
    run_turn(agent, "t", "hello")
    assert ledger_of(agent) is None
    with open_ledger(db_url) as ledger:
        assert ledger.events() == []


def test_building_an_agent_opens_no_ledger(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "fresh.db"
    with checkpointer_from_url(f"sqlite:///{path}") as saver:
        build_agent(echo(), strategy="filter", checkpointer=saver)
        tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert "remem_usage" not in tables  # created at the first model call, not before


# -- checkpoints written before the ledger ---------------------------------------------------------


class _LegacyRecord(TypedDict):
    turn: int
    node: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    at: str


class _LegacyState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    summary: str
    usage: Annotated[list[_LegacyRecord], operator.add]


def _write_legacy_thread(saver: Any, thread: str, turns: int) -> None:
    """A thread as remem's agent wrote it before the ledger: its usage list in the graph state."""

    def call_model(state: _LegacyState) -> dict[str, Any]:
        turn = len(state.get("usage", [])) + 1
        record = _LegacyRecord(
            turn=turn,
            node="call_model",
            model="old-model",
            input_tokens=100,
            output_tokens=10,
            latency_ms=1.5,
            at="2026-11-01T10:00:00+00:00",
        )
        return {"messages": [AIMessage(f"old reply {turn}")], "usage": [record]}

    graph = StateGraph(_LegacyState)
    graph.add_node("call_model", call_model)
    graph.add_edge(START, "call_model")
    graph.add_edge("call_model", END)
    old = graph.compile(checkpointer=saver)
    for n in range(turns):
        old.invoke({"messages": [HumanMessage(f"old question {n}")]}, thread_config(thread))


def test_a_checkpoint_with_a_legacy_usage_list_loads_and_moves_into_the_ledger(
    db_url: str, saver: Any
) -> None:
    _write_legacy_thread(saver, "old", 3)
    model = echo()
    agent = build_agent(model, strategy="filter", checkpointer=saver)
    values = agent.get_state(thread_config("old")).values
    assert len(values["usage"]) == 3 and len(values["messages"]) == 6  # loads as it was

    run_turn(agent, "old", "a new question")
    run_turn(agent, "old", "and another")
    with open_ledger(db_url) as ledger:
        rows = ledger.events(thread_id="old")
    assert [(r.model, r.turn) for r in rows] == [
        ("old-model", 1),
        ("old-model", 2),
        ("old-model", 3),
        ("scripted", 4),  # the turn number goes on from the legacy list
        ("scripted", 5),
    ]
    assert [r.source for r in rows[:3]] == ["counted"] * 3
    values = agent.get_state(thread_config("old")).values
    assert values["usage"] == [] and values["remem_turn"] == 5  # emptied: nothing grows any more


def test_legacy_spending_counts_against_the_thread_budget(saver: Any) -> None:
    _write_legacy_thread(saver, "old", 3)  # 330 tokens spent
    model = echo()
    agent = build_agent(
        model, strategy="filter", checkpointer=saver, settings=Settings(session_token_budget=340)
    )
    with pytest.raises(BudgetExceededError, match="330 tokens spent"):
        run_turn(agent, "old", "a question long enough to pass the budget")
    assert model.calls == []
    # Refused twice: the legacy rows were copied once (each has a call id).
    with pytest.raises(BudgetExceededError):
        run_turn(agent, "old", "a question long enough to pass the budget")
    ledger = ledger_of(agent)
    assert ledger is not None and len(ledger.events(thread_id="old")) == 3


# -- resume without paying twice --------------------------------------------------------------------


@pytest.mark.parametrize("resume", ["invoke", "run_turn"])
def test_a_failure_after_a_tool_round_resumes_without_repeating_the_first_call(
    db_url: str, saver: Any, resume: str
) -> None:
    lookup, seen = lookup_tool()
    model = ScriptedChatModel(
        replies=[call("a", "c1"), ConnectionError("endpoint down"), "a is known", "next"]
    )
    agent = build_agent(model, tools=[lookup], strategy="filter", checkpointer=saver)
    config = thread_config("t")
    with pytest.raises(ModelError, match="endpoint down"):
        agent.invoke({"messages": [HumanMessage("what is a?")]}, config)  # the plain graph path
    assert len(model.calls) == 2 and seen == ["a"]
    if resume == "invoke":
        agent.invoke(None, config)
    else:
        run_turn(agent, "t", "and next?")  # finishes the interrupted turn first
    first_calls = [c for c in model.calls if c[-1].text == "what is a?"]
    assert len(first_calls) == 1 and seen == ["a"]  # neither the paid call nor the tool ran again
    with open_ledger(db_url) as ledger:
        rows = ledger.events(thread_id="t")
    paid = 3 if resume == "run_turn" else 2  # the failed call raised: nothing was paid, nothing recorded
    assert [r.turn for r in rows] == [1, 1, 2][:paid]
    assert len(model.calls) == paid + 1


def test_a_failed_summary_resumes_without_calling_the_chat_model_again(db_url: str, saver: Any) -> None:
    chat = echo()
    summariser = ScriptedChatModel(replies=[RuntimeError("summariser down")], default="A summary.")
    agent = build_agent(
        chat,
        strategy=SummaryStrategy(keep=2, trigger_messages=3),
        checkpointer=saver,
        summarizer=LLMSummarizer(summariser),
    )
    config = thread_config("t")
    agent.invoke({"messages": [HumanMessage("first")]}, config)
    with pytest.raises(SummarizationError):
        agent.invoke({"messages": [HumanMessage("second")]}, config)
    assert len(chat.calls) == 2
    agent.invoke(None, config)
    agent.invoke(None, config)  # nothing left to run: invoking again changes nothing
    assert len(chat.calls) == 2 and len(summariser.calls) == 2
    with open_ledger(db_url) as ledger:
        rows = ledger.events(thread_id="t")
    assert [(r.kind, r.turn) for r in rows] == [("chat", 1), ("chat", 2), ("summariser", 2)]


def test_recording_the_same_reply_twice_adds_one_row(saver: Any) -> None:
    agent = build_agent(echo(), strategy="filter", checkpointer=saver)
    run_turn(agent, "t", "hello")
    ledger = ledger_of(agent)
    assert ledger is not None
    (row,) = ledger.events(thread_id="t")
    assert row.call_id and row.call_id.startswith("t:")
    ledger.record(row)  # a resumed run that records the same call again
    assert len(ledger.events(thread_id="t")) == 1


# -- the demo ----------------------------------------------------------------------------------------


def test_remem_usage_shows_the_demos_calls(tmp_path: Path) -> None:
    from remem.cli import main
    from remem.demo import run_demo

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    report = run_demo(Settings(database_url=url), turns=6)
    result = CliRunner().invoke(main, ["usage", "--db", url, "--by", "turn", "--format", "csv"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    assert [(r[0], int(r[1])) for r in rows] == [(report.thread_id, n) for n in range(1, 7)]
    header = lines[0].split(",")
    inputs = [int(r[header.index("input_tokens")]) for r in rows]
    assert inputs == [t.tokens_seen for t in report.turns]  # what the model was sent, turn by turn


def test_run_turns_check_is_not_read_again_by_the_turns_first_call(saver: Any) -> None:
    agent = build_agent(
        echo(), strategy="filter", checkpointer=saver, settings=Settings(session_token_budget=10**6)
    )
    run_turn(agent, "t", "warm up")  # the ledger is open and set up
    ledger = ledger_of(agent)
    assert ledger is not None
    reads: list[str] = []
    inner = ledger.inner()  # type: ignore[attr-defined]  # the lazy ledger's real one
    real = inner._read

    def counted(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        reads.append(sql)
        return real(sql, params)

    holds: list[Any] = []
    hold = inner.hold

    def counted_hold(keys: Any, **kwargs: Any) -> Any:
        holds.append(keys)
        return hold(keys, **kwargs)

    inner._read, inner.hold = counted, counted_hold
    run_turn(agent, "t", "one read of the thread's spending for this turn")
    # the precheck's hold reads the spending (its running totals, by key) and the call takes that hold
    assert reads == [] and holds == [[("thread", "t", "")]]


@pytest.mark.parametrize("approval", [False, True])
def test_run_turns_count_is_the_one_the_first_call_checks(saver: Any, approval: bool) -> None:
    """A counter of the caller's is given the whole view: once per turn (run_turn's check), not again by
    the call it checked, nor by the approval step (a threshold never reached)."""
    views: list[list[str]] = []

    def counter(messages: Any) -> int:
        views.append([str(m.content) for m in messages])
        return approximate_token_count(messages)

    agent = build_agent(
        echo(),
        strategy="filter",
        checkpointer=saver,
        token_counter=counter,
        settings=Settings(session_token_budget=10**6, approval_token_threshold=10**6 if approval else 0),
    )
    run_turn(agent, "t", "warm up")
    views.clear()
    run_turn(agent, "t", "counted once")
    estimates = [view for view in views if view and view[-1] == "counted once"]
    assert len(estimates) == 1 and estimates[0][-3:] == ["warm up", "noted (1 messages)", "counted once"]
    # A direct invoke (no run_turn check before it) still counts and checks its call.
    views.clear()
    agent.invoke({"messages": [HumanMessage(content="not checked before")]}, thread_config("t", None))
    assert len([view for view in views if view and view[-1] == "not checked before"]) == 1


def test_arun_turn_records_in_the_async_savers_database(tmp_path: Path) -> None:
    import asyncio

    from remem import acheckpointer_from_url, arun_turn

    url = f"sqlite:///{tmp_path / 'async.db'}"

    async def main() -> None:
        async with acheckpointer_from_url(url) as saver:
            agent = build_agent(echo(), strategy="filter", checkpointer=saver)
            await arun_turn(agent, "t", "hello", user_id="maya")
            await arun_turn(agent, "t", "again", user_id="maya")
            ledger = ledger_of(agent)
            assert ledger is not None
            ledger.close()

    asyncio.run(main())
    with open_ledger(url) as ledger:
        assert [(r.turn, r.user_id) for r in ledger.events(thread_id="t")] == [(1, "maya"), (2, "maya")]
