"""build_agent as the seeds build their agent: tools in the loop, settings read by default, no model refused early."""

from __future__ import annotations

import itertools
import os
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from remem import (
    BudgetExceededError,
    ConfigError,
    ModelError,
    ScriptedChatModel,
    Settings,
    build_agent,
    run_turn,
)
from remem.agent import ledger_of, thread_config
from remem.messages import is_provider_valid
from tests.openai_server import openai_compatible_server

STRATEGIES = ["filter", "delete", "trim", "summary"]
# Small sizes, so that every strategy cuts inside tool loops within a few turns.
SMALL = Settings(keep_messages=3, max_tokens=120, summary_trigger_messages=6, summary_max_tokens=200)


class ToolScript:
    """A scripted model's brain: each turn runs ``rounds`` of parallel tool calls, then answers."""

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns = deque(turns)
        self.rounds: deque[int] = deque()
        self.ids = itertools.count()

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], HumanMessage):
            self.rounds = deque(r for r in (self.turns.popleft() if self.turns else []) if r)
        if self.rounds:
            calls = [
                {"name": "lookup", "args": {"key": f"k{n}"}, "id": f"call-{n}"}
                for n in itertools.islice(self.ids, self.rounds.popleft())
            ]
            return AIMessage("", tool_calls=calls)
        results = [m.text for m in messages if isinstance(m, ToolMessage)]
        return AIMessage(f"answered from {len(results)} result(s): {'; '.join(results[-3:])}")


def make_lookup() -> tuple[Any, list[str]]:
    seen: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        seen.append(key)
        return f"value of {key}"

    return lookup, seen


def state_of(agent: Any, thread: str = "t") -> dict[str, Any]:
    values: dict[str, Any] = agent.get_state(thread_config(thread)).values
    return values


def run_script(strategy: str, turns: list[list[int]]) -> tuple[ScriptedChatModel, Any, list[str]]:
    lookup, seen = make_lookup()
    model = ScriptedChatModel(default=ToolScript(turns))
    agent = build_agent(
        model,
        tools=[lookup],
        strategy=strategy,
        checkpointer=InMemorySaver(),
        settings=SMALL,
        summarizer="extractive",
    )
    for i in range(len(turns)):
        run_turn(agent, "t", f"My locker is number {i}. What are the values?")
    return model, agent, seen


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tool_calls_run_and_their_results_reach_the_model_through_every_strategy(strategy: str) -> None:
    model, agent, seen = run_script(strategy, [[2], [1, 2], [0], [3], [1, 1, 1]])
    # 2 + 3 + 0 + 3 + 3 calls, each run once, with the arguments the model gave (a turn's calls run in
    # parallel, so their order within the turn is not fixed).
    assert sorted(seen, key=lambda key: int(key[1:])) == [f"k{n}" for n in range(11)]
    for view in model.calls:
        assert is_provider_valid(view), [m.type for m in view]
    # Every call that follows a tool round is sent that round's results, all of them.
    after_tools = [view for view in model.calls if isinstance(view[-1], ToolMessage)]
    assert len(after_tools) == 1 + 2 + 0 + 1 + 3  # one per round
    for view in after_tools:
        call_ids = {c["id"] for m in view if isinstance(m, AIMessage) for c in m.tool_calls}
        result_ids = {m.tool_call_id for m in view if isinstance(m, ToolMessage)}
        assert result_ids == call_ids
    messages = state_of(agent)["messages"]
    assert is_provider_valid(messages)
    assert messages[-1].text.startswith("answered from")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_state_keeps_or_compacts_tool_turns_as_the_strategy_says(strategy: str) -> None:
    _, agent, _ = run_script(strategy, [[1], [1], [1], [1]])
    messages = state_of(agent)["messages"]
    if strategy in ("filter", "trim"):  # they change the view only: every message stays
        assert [m.type for m in messages] == ["human", "ai", "tool", "ai"] * 4
    else:  # delete and summary cut the state too, never between a call and its result
        assert len(messages) < 16
        assert messages[0].type == "human"
    if strategy == "summary":
        assert state_of(agent)["summary"]


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(STRATEGIES),
    st.lists(st.lists(st.integers(0, 3), max_size=3), min_size=1, max_size=5),
)
def test_every_view_of_any_tool_script_is_provider_valid(strategy: str, turns: list[list[int]]) -> None:
    model, agent, seen = run_script(strategy, turns)
    assert len(seen) == sum(map(sum, turns))
    assert all(is_provider_valid(view) for view in model.calls)
    assert all(view[-1].type in ("human", "tool") for view in model.calls)
    assert is_provider_valid(state_of(agent)["messages"])


def test_a_tool_that_raises_answers_with_its_error_and_the_thread_goes_on() -> None:
    @tool
    def broken(key: str) -> str:
        """Always fails."""
        raise RuntimeError("the backend is down")

    script = [
        AIMessage("", tool_calls=[{"name": "broken", "args": {"key": "x"}, "id": "c1"}]),
        "the tool failed, sorry",
        "hello again",
    ]
    model = ScriptedChatModel(replies=script)
    agent = build_agent(model, tools=[broken], strategy="filter", checkpointer=InMemorySaver())
    assert run_turn(agent, "t", "look x up").text == "the tool failed, sorry"
    result = model.calls[1][-1]
    assert isinstance(result, ToolMessage) and "the backend is down" in result.text
    assert run_turn(agent, "t", "hi").text == "hello again"
    assert is_provider_valid(state_of(agent)["messages"])


def test_a_model_failure_inside_a_tool_loop_resumes_without_running_the_tool_again() -> None:
    lookup, seen = make_lookup()
    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "a"}, "id": "c1"}]),
            ConnectionError("endpoint down"),
            "a is 'value of a'",
            "and next",
        ]
    )
    agent = build_agent(model, tools=[lookup], strategy="filter", checkpointer=InMemorySaver())
    with pytest.raises(ModelError, match="endpoint down"):
        run_turn(agent, "t", "what is a?")
    assert run_turn(agent, "t", "and next?").text == "and next"
    assert seen == ["a"]
    texts = [m.text for m in state_of(agent)["messages"]]
    assert texts == ["what is a?", "", "value of a", "a is 'value of a'", "and next?", "and next"]


def test_usage_counts_a_tool_loop_as_one_turn() -> None:
    _, agent, _ = run_script("filter", [[1, 1], [], [2]])
    ledger = ledger_of(agent)
    assert ledger is not None
    usage = ledger.events(thread_id="t")
    assert [(r.node, r.turn) for r in usage] == [("call_model", t) for t in (1, 1, 1, 2, 3, 3)]
    assert state_of(agent)["remem_turn"] == 3


def test_plain_functions_and_a_tool_node_are_accepted_as_tools() -> None:
    from langgraph.prebuilt import ToolNode

    def double(x: int) -> int:
        """Double x."""
        return 2 * x

    for tools in ([double], ToolNode([double])):
        model = ScriptedChatModel(
            replies=[AIMessage("", tool_calls=[{"name": "double", "args": {"x": 21}, "id": "c1"}]), "42"]
        )
        agent = build_agent(model, tools=tools, strategy="filter", checkpointer=InMemorySaver())
        assert run_turn(agent, "t", "double 21").text == "42"
        assert model.calls[1][-1].text == "42"


def test_a_model_that_cannot_call_tools_is_refused_at_build_time() -> None:
    lookup, _ = make_lookup()
    with pytest.raises(ConfigError, match="cannot call tools"):
        build_agent(FakeListChatModel(responses=["x"]), tools=[lookup], settings=SMALL)
    assert build_agent(FakeListChatModel(responses=["x"]), settings=SMALL).name == "remem-agent[summary]"
    with pytest.raises(ConfigError, match="cannot call tools"):
        build_agent(RunnableLambda(lambda _: AIMessage("x")), tools=[lookup], settings=SMALL)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No REMEM_* variable and no remem.toml: what a new user has."""
    for name in list(os.environ):
        if name.startswith("REMEM_") or name == "OPENAI_API_KEY":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


@pytest.mark.parametrize("model", [None, "absent"])
def test_no_model_is_refused_at_build_time_saying_what_to_configure(clean_env: Any, model: Any) -> None:
    saver = InMemorySaver()
    with pytest.raises(ConfigError) as caught:
        build_agent(checkpointer=saver) if model == "absent" else build_agent(model, checkpointer=saver)
    message = str(caught.value)
    assert "REMEM_LLM_MODEL" in message and "ScriptedChatModel" in message
    assert list(saver.list(None)) == []  # nothing was written, so no message is sent twice later


@pytest.mark.parametrize(
    ("model", "needle"),
    [(42, "got int"), ("gpt-4o", "got str"), (ChatOpenAI, "the class ChatOpenAI"), (object(), "got object")],
)
def test_an_object_that_is_not_a_chat_model_is_refused_at_build_time(model: Any, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_agent(model, settings=SMALL)


def test_the_configured_model_is_used_when_none_is_given(clean_env: Any) -> None:
    with openai_compatible_server(["Hello from the endpoint."]) as server:
        clean_env.setenv("REMEM_LLM_MODEL", "local-model")
        clean_env.setenv("REMEM_LLM_BASE_URL", server.url)
        agent = build_agent(checkpointer=InMemorySaver())
        assert run_turn(agent, "t", "hi").text == "Hello from the endpoint."
    assert server.requests[0]["model"] == "local-model"


def test_settings_come_from_the_environment_and_remem_toml_by_default(clean_env: Any) -> None:
    clean_env.setenv("REMEM_STRATEGY", "delete")
    clean_env.setenv("REMEM_KEEP_MESSAGES", "2")
    agent = build_agent(ScriptedChatModel(), checkpointer=InMemorySaver())
    assert agent.name == "remem-agent[delete]"
    for i in range(3):
        run_turn(agent, "t", f"message {i}")
    assert [m.text for m in state_of(agent)["messages"]] == ["message 2", "OK."]

    clean_env.delenv("REMEM_STRATEGY")
    Path("remem.toml").write_text('[remem]\nstrategy = "trim"\nturn_token_budget = 5\n', encoding="utf-8")
    agent = build_agent(ScriptedChatModel(), checkpointer=InMemorySaver())
    assert agent.name == "remem-agent[trim]"
    with pytest.raises(BudgetExceededError, match="turn_token_budget of 5"):
        run_turn(agent, "t", "a message longer than five tokens, surely")


def test_explicit_strategy_and_settings_win_over_the_environment(clean_env: Any) -> None:
    clean_env.setenv("REMEM_STRATEGY", "delete")
    assert build_agent(ScriptedChatModel(), strategy="filter").name == "remem-agent[filter]"
    assert build_agent(ScriptedChatModel(), settings=Settings(strategy="trim")).name == "remem-agent[trim]"


def test_a_bad_setting_in_the_environment_is_a_clear_error(clean_env: Any) -> None:
    clean_env.setenv("REMEM_STRATEGY", "remember-everything")
    with pytest.raises(ConfigError, match="REMEM_STRATEGY"):
        build_agent(ScriptedChatModel())


def test_the_token_counter_comes_from_the_settings(clean_env: Any) -> None:
    text = "hello " * 5 + "hello"  # 13 tokens by the approximate count, 9 by o200k
    clean_env.setenv("REMEM_TURN_TOKEN_BUDGET", "10")
    with pytest.raises(BudgetExceededError):
        run_turn(build_agent(ScriptedChatModel(), strategy="filter", checkpointer=InMemorySaver()), "t", text)
    clean_env.setenv("REMEM_TOKEN_COUNTER", "o200k")
    agent = build_agent(ScriptedChatModel(), strategy="filter", checkpointer=InMemorySaver())
    assert run_turn(agent, "t", text).text == "OK."
