"""The seeds' agent: strategies by name, compaction, usage, budgets, and resuming without paying twice."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from remem import (
    BudgetExceededError,
    ConfigError,
    InvalidMessagesError,
    LLMSummarizer,
    ScriptedChatModel,
    Settings,
    SummarizationError,
    SummaryStrategy,
    build_agent,
    run_turn,
)
from remem.agent import ledger_of, thread_config
from remem.messages import approximate_token_count, is_provider_valid
from remem.usage import UsageEvent


def state_of(agent: Any, thread: str = "t") -> dict[str, Any]:
    values: dict[str, Any] = agent.get_state(thread_config(thread)).values
    return values


def talk(agent: Any, turns: int, thread: str = "t") -> None:
    for i in range(turns):
        run_turn(agent, thread, f"My lucky number is {i}. I live in city {i}.")


def echo_model() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda messages: f"noted ({len(messages)} messages)")


def test_filter_shows_the_last_n_and_keeps_everything() -> None:
    model = echo_model()
    agent = build_agent(
        model, strategy="filter", checkpointer=InMemorySaver(), settings=Settings(keep_messages=3)
    )
    talk(agent, 5)
    assert len(state_of(agent)["messages"]) == 10
    last_input = model.calls[-1]
    assert [m.type for m in last_input] == ["human", "ai", "human"]
    assert last_input[-1].text.startswith("My lucky number is 4")


def test_delete_removes_old_messages_from_the_state_for_good() -> None:
    agent = build_agent(
        echo_model(), strategy="delete", checkpointer=InMemorySaver(), settings=Settings(keep_messages=2)
    )
    talk(agent, 4)
    messages = state_of(agent)["messages"]
    assert [m.type for m in messages] == ["human", "ai"]
    assert messages[0].text.startswith("My lucky number is 3")


def test_trim_sends_what_fits_the_budget() -> None:
    model = echo_model()
    agent = build_agent(
        model, strategy="trim", checkpointer=InMemorySaver(), settings=Settings(max_tokens=60)
    )
    talk(agent, 6)
    assert len(state_of(agent)["messages"]) == 12
    assert isinstance(model.calls[-1][0], HumanMessage)
    assert 1 < len(model.calls[-1]) < 12


def test_summary_folds_old_turns_and_puts_the_summary_in_front() -> None:
    model = echo_model()
    settings = Settings(keep_messages=2, summary_trigger_messages=4)
    agent = build_agent(
        model, strategy="summary", checkpointer=InMemorySaver(), settings=settings, summarizer="extractive"
    )
    talk(agent, 4)
    state = state_of(agent)
    assert len(state["messages"]) <= 4
    assert "lucky number is 0" in state["summary"]  # the earliest fact survives in the summary
    last_input = model.calls[-1]
    assert "<conversation_summary" in last_input[0].text and isinstance(last_input[0], HumanMessage)
    assert all(is_provider_valid(call) for call in model.calls)


def test_strategy_can_be_an_object_and_a_system_prompt_is_not_stored() -> None:
    model = echo_model()
    agent = build_agent(
        model,
        strategy=SummaryStrategy(keep=2, trigger_messages=3),
        checkpointer=InMemorySaver(),
        system_prompt="You are terse.",
        summarizer="extractive",
    )
    talk(agent, 3)
    assert isinstance(model.calls[-1][0], SystemMessage)
    assert not any(isinstance(m, SystemMessage) for m in state_of(agent)["messages"])


def test_unknown_strategy_and_summarizer_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="choose one of filter, delete, trim, summary"):
        build_agent(echo_model(), strategy="remember-all")
    with pytest.raises(ValueError, match="unknown summarizer"):
        build_agent(echo_model(), summarizer="magic")


def usage_of(agent: Any, thread: str = "t") -> list[UsageEvent]:
    ledger = ledger_of(agent)
    assert ledger is not None
    return ledger.events(thread_id=thread)


def test_usage_is_recorded_in_the_ledger_and_the_state_keeps_one_integer() -> None:
    model = echo_model()
    agent = build_agent(model, strategy="filter", checkpointer=InMemorySaver())
    talk(agent, 3)
    usage = usage_of(agent)
    assert [u.turn for u in usage] == [1, 2, 3]
    assert all(u.node == "call_model" and u.model == "scripted" and u.kind == "chat" for u in usage)
    # The model reported its usage; the record carries exactly that, per call.
    assert [u.input_tokens for u in usage] == [approximate_token_count(call) for call in model.calls]
    assert all(u.source == "provider" and u.output_tokens > 0 and (u.latency_ms or 0) >= 0 for u in usage)
    assert usage[2].input_tokens > usage[0].input_tokens  # the history grew
    state = state_of(agent)
    assert state["remem_turn"] == 3 and "usage" not in state  # nothing in the state grows with the calls


def test_llm_summary_usage_is_recorded_too() -> None:
    chat = echo_model()
    summarizer_model = ScriptedChatModel(default="The user shared lucky numbers and cities.")
    agent = build_agent(
        chat,
        strategy=SummaryStrategy(keep=2, trigger_messages=3),
        checkpointer=InMemorySaver(),
        summarizer=LLMSummarizer(summarizer_model),
    )
    talk(agent, 2)
    usage = usage_of(agent)
    assert [(u.node, u.kind, u.turn) for u in usage] == [
        ("call_model", "chat", 1),
        ("call_model", "chat", 2),
        ("summarize_conversation", "summariser", 2),
    ]
    assert usage[2].input_tokens > 0 and usage[2].model == "scripted"


def test_a_failed_summary_keeps_the_reply_and_resumes_without_calling_the_model_again() -> None:
    chat = echo_model()
    summarizer_model = ScriptedChatModel(
        replies=[RuntimeError("summariser endpoint down")], default="A summary."
    )
    agent = build_agent(
        chat,
        strategy=SummaryStrategy(keep=2, trigger_messages=3),
        checkpointer=InMemorySaver(),
        summarizer=LLMSummarizer(summarizer_model),
    )
    run_turn(agent, "t", "first")
    with pytest.raises(SummarizationError, match="retry the summary step"):
        agent.invoke({"messages": [HumanMessage(content="second")]}, thread_config("t"))
    snapshot = agent.get_state(thread_config("t"))
    assert snapshot.next == ("summarize_conversation",)
    assert snapshot.values["messages"][-1].text.startswith("noted")  # the reply was kept
    assert len(chat.calls) == 2

    agent.invoke(None, thread_config("t"))  # resume: only the summary step runs
    assert len(chat.calls) == 2
    assert state_of(agent)["summary"] == "A summary."
    assert agent.get_state(thread_config("t")).next == ()


def test_run_turn_finishes_an_interrupted_turn_before_the_next() -> None:
    chat = echo_model()
    summarizer_model = ScriptedChatModel(replies=[RuntimeError("down")], default="A summary.")
    agent = build_agent(
        chat,
        strategy=SummaryStrategy(keep=2, trigger_messages=3),
        checkpointer=InMemorySaver(),
        summarizer=LLMSummarizer(summarizer_model),
    )
    run_turn(agent, "t", "first")
    with pytest.raises(SummarizationError):
        agent.invoke({"messages": [HumanMessage(content="second")]}, thread_config("t"))
    run_turn(agent, "t", "third")
    assert len(chat.calls) == 3  # one call per user turn, none repeated
    assert state_of(agent)["summary"] == "A summary."


def test_turn_budget_refuses_the_message_before_writing_it() -> None:
    chat = echo_model()
    saver = InMemorySaver()
    agent = build_agent(chat, strategy="filter", checkpointer=saver, settings=Settings(turn_token_budget=30))
    run_turn(agent, "t", "short")
    before = len(list(saver.list(thread_config("t"))))
    with pytest.raises(BudgetExceededError, match="REMEM_TURN_TOKEN_BUDGET"):
        run_turn(agent, "t", "a much longer message " * 10)
    assert len(chat.calls) == 1
    assert len(list(saver.list(thread_config("t")))) == before  # no checkpoint written
    assert state_of(agent)["messages"][0].text == "short"
    run_turn(agent, "t", "short again")  # the thread is not stuck on the refused message
    assert state_of(agent)["messages"][-2].text == "short again"


def test_session_budget_counts_what_the_thread_spent() -> None:
    chat = echo_model()
    agent = build_agent(
        chat, strategy="filter", checkpointer=InMemorySaver(), settings=Settings(session_token_budget=80)
    )
    with pytest.raises(BudgetExceededError, match="session_token_budget of 80"):
        for i in range(20):
            run_turn(agent, "t", f"turn {i} with a few words")
    spent = sum(u.tokens for u in usage_of(agent))
    assert spent <= 80


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x" * 1_048_576,
        [],
        [{"role": "tool", "content": "orphan", "tool_call_id": "nope"}],
        [{"role": "?", "content": "x"}],
    ],
)
def test_bad_input_is_refused_and_the_thread_is_unchanged(bad: Any) -> None:
    agent = build_agent(echo_model(), strategy="filter", checkpointer=InMemorySaver())
    run_turn(agent, "t", "hello")
    before = agent.get_state(thread_config("t"))
    with pytest.raises(InvalidMessagesError):
        run_turn(agent, "t", bad)
    after = agent.get_state(thread_config("t"))
    assert after.config == before.config
    assert after.values == before.values


def test_a_model_failure_keeps_the_question_and_says_so() -> None:
    chat = ScriptedChatModel(replies=[ConnectionError("network unreachable")], default="back online")
    agent = build_agent(chat, strategy="filter", checkpointer=InMemorySaver())
    with pytest.raises(Exception, match="your message is kept"):
        run_turn(agent, "t", "are you there?")
    assert state_of(agent)["messages"][-1].text == "are you there?"
    reply = run_turn(agent, "t", "and now?")
    assert reply.text == "back online"
    texts = [m.text for m in state_of(agent)["messages"]]
    assert texts[:2] == ["are you there?", "back online"]


def test_tool_call_histories_reach_the_model_valid() -> None:
    history: list[BaseMessage] = [
        HumanMessage("weather?", id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "w", "args": {}, "id": "c1"}, {"name": "w", "args": {}, "id": "c2"}],
        ),
    ]
    from langchain_core.messages import ToolMessage

    history += [
        ToolMessage("sun", tool_call_id="c1", id="t1"),
        ToolMessage("rain", tool_call_id="c2", id="t2"),
    ]
    model = echo_model()
    agent = build_agent(
        model, strategy="filter", checkpointer=InMemorySaver(), settings=Settings(keep_messages=2)
    )
    agent.invoke({"messages": history}, thread_config("t"))
    assert is_provider_valid(model.calls[-1])
    assert model.calls[-1][0].id == "h1"  # the cut moved back to the question, not into the tool results


def test_an_input_ending_in_an_unanswered_tool_call_is_refused_before_it_is_written() -> None:
    saver = InMemorySaver()
    model = echo_model()
    agent = build_agent(model, strategy="filter", checkpointer=saver)
    run_turn(agent, "t", "hello")
    before = len(list(saver.list(thread_config("t"))))
    call = AIMessage("", id="a9", tool_calls=[{"name": "weather", "args": {}, "id": "c9"}])
    with pytest.raises(InvalidMessagesError, match="the thread was not changed"):
        run_turn(agent, "t", [HumanMessage("weather?"), call])
    assert len(list(saver.list(thread_config("t")))) == before  # nothing written
    assert len(model.calls) == 1
    run_turn(agent, "t", "still there?")  # later messages are not refused because of it
    assert [m.text for m in state_of(agent)["messages"]][-2:] == ["still there?", "noted (3 messages)"]


async def test_arun_turn_refuses_the_same_inputs_and_finishes_the_same_turns() -> None:
    from remem import arun_turn

    saver = InMemorySaver()
    agent = build_agent(echo_model(), strategy="filter", checkpointer=saver)
    await arun_turn(agent, "t", "hello")
    call = AIMessage("", id="a9", tool_calls=[{"name": "weather", "args": {}, "id": "c9"}])
    with pytest.raises(InvalidMessagesError, match="the thread was not changed"):
        await arun_turn(agent, "t", [call])
    assert [m.text for m in state_of(agent)["messages"]] == ["hello", "noted (1 messages)"]
