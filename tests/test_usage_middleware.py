"""BudgetMiddleware on LangChain's create_agent: alone, with ContextCardMiddleware (both orders), approval."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from remem import Memory, load_settings
from remem.errors import BudgetExceededError
from remem.memory import is_card_message
from remem.messages import approximate_token_count
from remem.middleware import BudgetMiddleware, ContextCardMiddleware
from remem.models import ScriptedChatModel
from remem.testing import offline_settings
from remem.usage import Budgets, Ledger, Price, PriceTable, open_ledger

SETTINGS = offline_settings()
PRICES = PriceTable({"scripted": Price(1.0, 2.0)})


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    with open_ledger(db_url) as opened:
        yield opened


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


def _config(thread: str = "t1", user: str = "maya") -> Any:
    return {"configurable": {"thread_id": thread, "user_id": user}}


def _say(agent: Any, text: str, thread: str = "t1") -> dict[str, Any]:
    result: dict[str, Any] = agent.invoke({"messages": [HumanMessage(content=text)]}, _config(thread))
    return result


def test_each_call_is_recorded_with_its_thread_user_turn_and_cost(ledger: Ledger) -> None:
    call = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"city": "Lyon"}, "id": "c1"}])
    model = ScriptedChatModel(replies=[call, "It is sunny.", "Bye."])
    budget = BudgetMiddleware(ledger, prices=PRICES)
    agent = create_agent(model=model, tools=[lookup], middleware=[budget], checkpointer=InMemorySaver())
    _say(agent, "Weather in Lyon?")
    _say(agent, "Thanks")
    events = ledger.events(thread_id="t1")
    assert [(e.turn, e.kind, e.user_id, e.source) for e in events] == [
        (1, "chat", "maya", "provider"),
        (1, "chat", "maya", "provider"),  # the tool round is the same turn
        (2, "chat", "maya", "provider"),
    ]
    assert all(e.cost == pytest.approx((e.input_tokens * 1.0 + e.output_tokens * 2.0) / 1e6) for e in events)
    assert [t.calls for t in ledger.totals(by="turn", thread_id="t1")] == [2, 1]
    state = agent.get_state(_config()).values
    assert state["remem_turn"] == 2 and "usage" not in state  # one integer, no growing list


def test_a_call_over_budget_is_refused_before_anything_is_sent(ledger: Ledger) -> None:
    model = ScriptedChatModel(default="OK.")
    budget = BudgetMiddleware(ledger, budgets=Budgets(call_tokens=50), prices=PRICES)
    agent = create_agent(model=model, tools=[], middleware=[budget], checkpointer=InMemorySaver())
    _say(agent, "short")
    with pytest.raises(BudgetExceededError, match="call_token_budget of 50 tokens") as caught:
        _say(agent, "a long question " * 40)
    assert caught.value.budget == "call_token_budget" and caught.value.amount is not None
    assert caught.value.amount > 50
    assert len(model.calls) == 1  # the second call was never made
    assert ledger.spent(thread_id="t1").calls == 1


def test_the_tool_schemas_and_the_system_prompt_count_toward_the_estimate(ledger: Ledger) -> None:
    limit = 60
    plain = create_agent(
        model=ScriptedChatModel(default="OK."),
        tools=[],
        middleware=[BudgetMiddleware(ledger, budgets=Budgets(call_tokens=limit))],
    )
    plain.invoke({"messages": [HumanMessage(content="hello there")]}, _config("a"))
    with pytest.raises(BudgetExceededError):
        create_agent(
            model=ScriptedChatModel(default="OK."),
            tools=[lookup],
            system_prompt="You are a careful assistant. " * 10,
            middleware=[BudgetMiddleware(ledger, budgets=Budgets(call_tokens=limit))],
        ).invoke({"messages": [HumanMessage(content="hello there")]}, _config("b"))


def test_thread_and_user_day_budgets_read_what_the_ledger_holds(ledger: Ledger) -> None:
    model = ScriptedChatModel(default="OK.")
    budgets = Budgets(thread_tokens=400, user_day_cost=1.0)
    agent = create_agent(
        model=model, tools=[], middleware=[BudgetMiddleware(ledger, budgets=budgets, prices=PRICES)]
    )
    _say(agent, "one " * 100, thread="x")  # about 100+ tokens
    with pytest.raises(BudgetExceededError, match="session_token_budget"):
        _say(agent, "two " * 300, thread="x")
    _say(agent, "two " * 300, thread="y")  # another thread starts from zero
    # The user's day: a new middleware (another process) reads the same ledger.
    expensive = PriceTable({"scripted": Price(50_000.0, 50_000.0)})
    other = create_agent(
        model=model, tools=[], middleware=[BudgetMiddleware(ledger, budgets=budgets, prices=expensive)]
    )
    with pytest.raises(BudgetExceededError, match="user_day_cost_budget"):
        _say(other, "three " * 100, thread="z")


def test_a_reply_without_provider_usage_is_recorded_as_its_estimate_counted_it(ledger: Ledger) -> None:
    # The estimate counted the prompt before the call (system prompt and tool schemas too); the row takes
    # that count instead of counting the messages again.
    class Unreported(ScriptedChatModel):
        def _next_reply(self, messages: list[BaseMessage]) -> AIMessage:
            return super()._next_reply(messages).model_copy(update={"usage_metadata": None})

    def agent(budgets: Budgets) -> Any:
        middleware = [BudgetMiddleware(ledger, budgets=budgets)]
        return create_agent(
            model=Unreported(default="OK."), tools=[lookup], system_prompt="Be brief.", middleware=middleware
        )

    with pytest.raises(BudgetExceededError) as caught:  # a budget of 1 token gives the estimate
        _say(agent(Budgets(call_tokens=1)), "hello there", thread="probe")
    _say(agent(Budgets()), "hello there")
    [row] = ledger.events(thread_id="t1")
    sent = [SystemMessage(content="Be brief."), HumanMessage(content="hello there")]
    assert row.source == "counted" and row.input_tokens == caught.value.amount
    assert row.input_tokens > approximate_token_count(sent)  # the tool schemas are in it


@pytest.mark.parametrize("order", ["card_first", "budget_first"])
def test_with_the_context_card_middleware_in_either_order(ledger: Ledger, db_url: str, order: str) -> None:
    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        card = ContextCardMiddleware(memory, thread_id="t1", user_id="maya", compaction_token_trigger=150)
        budget = BudgetMiddleware(ledger, budgets=Budgets(thread_tokens=100_000), prices=PRICES)
        middleware = [card, budget] if order == "card_first" else [budget, card]
        model = ScriptedChatModel(default=lambda msgs: f"Noted: {msgs[-1].text[:40]}")
        agent = create_agent(model=model, tools=[], middleware=middleware, checkpointer=InMemorySaver())
        for i in range(6):
            _say(agent, f"Turn {i}: remember that project {i} is due on day {i + 1}. " * 3)
        events = ledger.events(thread_id="t1")
        assert [e.turn for e in events] == [1, 2, 3, 4, 5, 6]
        assert len(memory.get_thread("t1").messages()) == 12  # the card middleware still persists
        assert any(is_card_message(m) for m in model.calls[-1])  # the card middleware compacted
        # In both orders the ledger holds what was really sent: the provider's count of the compacted call.
        assert [e.input_tokens for e in events] == [approximate_token_count(c) for c in model.calls]


def test_approval_pauses_with_the_estimate_and_resuming_approves_or_refuses(ledger: Ledger) -> None:
    model = ScriptedChatModel(default="Here is a long answer.")
    budget = BudgetMiddleware(ledger, prices=PRICES, approve_tokens=30)
    agent = create_agent(model=model, tools=[], middleware=[budget], checkpointer=InMemorySaver())
    _say(agent, "hi")  # under the threshold: no pause
    assert len(model.calls) == 1
    paused = _say(agent, "please write a very long essay about budgets " * 3)
    (pending,) = paused["__interrupt__"]
    assert pending.value["kind"] == "remem.approval" and pending.value["input_tokens"] > 30
    assert pending.value["turn"] == 2 and pending.value["cost"] is not None
    assert len(model.calls) == 1  # nothing sent while waiting
    done = agent.invoke(Command(resume=True), _config())
    assert len(model.calls) == 2 and done["messages"][-1].text == "Here is a long answer."
    _say(agent, "another long essay request please " * 3)
    refused = agent.invoke(Command(resume=False), _config())
    assert len(model.calls) == 2  # refused: not sent
    last = refused["messages"][-1]
    assert isinstance(last, AIMessage) and "not approved" in last.text
    texts = [m.text for m in refused["messages"] if isinstance(m, HumanMessage)]
    assert texts[-1].startswith("another long essay")  # nothing lost
    assert [e.turn for e in ledger.events(thread_id="t1")] == [1, 2]
    assert not any(isinstance(m, ToolMessage) for m in refused["messages"])


async def test_the_async_path_records_and_checks_the_same_way(ledger: Ledger) -> None:
    model = ScriptedChatModel(default="OK.")
    budget = BudgetMiddleware(ledger, budgets=Budgets(call_tokens=50), prices=PRICES)
    agent = create_agent(model=model, tools=[], middleware=[budget])
    await agent.ainvoke({"messages": [HumanMessage(content="hi")]}, _config())
    with pytest.raises(BudgetExceededError):
        await agent.ainvoke({"messages": [HumanMessage(content="long " * 200)]}, _config())
    assert ledger.spent(thread_id="t1").calls == 1 and len(model.calls) == 1


def test_budgets_prices_and_approval_come_from_the_settings(ledger: Ledger) -> None:
    settings = load_settings(
        environ={
            "REMEM_CALL_TOKEN_BUDGET": "50",
            "REMEM_APPROVAL_TOKEN_THRESHOLD": "40",
            "REMEM_PRICES": '{"scripted": {"input": 3, "output": 6}}',
        },
        config_file=None,
    )
    budget = BudgetMiddleware(ledger, settings=settings)
    assert (budget.budgets.call_tokens, budget.approve_tokens) == (50, 40)
    model = ScriptedChatModel(default="OK.")
    agent = create_agent(model=model, tools=[], middleware=[budget], checkpointer=InMemorySaver())
    _say(agent, "hi")
    (event,) = ledger.events()
    assert event.cost == pytest.approx((event.input_tokens * 3 + event.output_tokens * 6) / 1e6)
    with pytest.raises(BudgetExceededError, match="REMEM_CALL_TOKEN_BUDGET"):
        _say(agent, "long " * 100)


class _Recording(BudgetMiddleware):
    """Keeps each call's estimate."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[int] = []

    def estimate(self, request: Any) -> Any:
        found = super().estimate(request)
        self.seen.append(found.input_tokens)
        return found


@pytest.mark.parametrize("name", ["gpt-4o-mini", "scripted"])
def test_a_known_models_estimate_is_counted_in_its_own_encoding(name: str) -> None:
    from langchain_core.messages import SystemMessage

    from remem.messages import chat_token_counter, tool_schema_text

    call = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"city": "Lyon"}, "id": "c1"}])
    model = ScriptedChatModel(replies=[call, "It is sunny.", "Bye."], model_name=name)
    budget = _Recording()
    agent = create_agent(model=model, tools=[lookup], middleware=[budget], checkpointer=InMemorySaver())
    _say(agent, "Weather in Lyon? " + "1234567890 " * 20)  # digits: o200k and chars/4 part ways
    _say(agent, "Thanks")
    count = chat_token_counter("o200k_base") if name == "gpt-4o-mini" else approximate_token_count
    schema = [SystemMessage(content=tool_schema_text([lookup]))]
    # Each estimate equals counting the whole prompt at once (the prefix reuse changes nothing).
    assert budget.seen == [count([*sent, *schema]) for sent in model.calls]
    other = approximate_token_count if name == "gpt-4o-mini" else chat_token_counter("o200k_base")
    assert budget.seen != [other([*sent, *schema]) for sent in model.calls]


def test_the_prefix_count_equals_counting_everything_for_any_edit_sequence() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from remem.usage._prefix import PrefixCounter

    texts = st.text(alphabet="ab cdé1{}", max_size=30)
    ops = st.lists(
        st.tuples(
            st.sampled_from(["append", "edit", "remove", "replace_id", "slide"]), st.integers(0, 50), texts
        ),
        max_size=40,
    )

    @settings(max_examples=200, deadline=None)
    @given(ops)
    def check(steps: list[tuple[str, int, str]]) -> None:
        counter = PrefixCounter(approximate_token_count)
        messages: list[BaseMessage] = []
        for serial, (op, at, text) in enumerate(steps, 1):
            if op == "append" or not messages:
                kind = HumanMessage if serial % 2 else AIMessage
                messages = [*messages, kind(content=text, id=f"m{serial}")]
            else:
                i = at % len(messages)
                old = messages[i]
                if op == "slide":  # a window: the oldest messages drop out, a new one comes in
                    messages = [*messages[i:], HumanMessage(content=text, id=f"s{serial}")]
                    assert counter("thread", messages) == approximate_token_count(messages)
                    continue
                if op == "edit":  # same id, new content (LangGraph's replace by id)
                    changed = old.model_copy(update={"content": old.content + text + "x"})
                elif op == "replace_id":
                    changed = old.model_copy(update={"id": f"r{serial}"})
                else:
                    messages = messages[:i] + messages[i + 1 :]
                    changed = None
                if changed is not None:
                    messages = [*messages[:i], changed, *messages[i + 1 :]]
            assert counter("thread", messages) == approximate_token_count(messages)

    check()


def test_a_system_prompt_that_changes_per_call_is_counted_as_sent_and_the_schemas_are_built_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain.agents.middleware import dynamic_prompt
    from langchain_core.messages import SystemMessage

    import remem.middleware.budget as budget_module
    from remem.messages import tool_schema_text

    built: list[int] = []

    def counted_schema(tools: Any) -> str:
        built.append(len(tools))
        return tool_schema_text(tools)

    monkeypatch.setattr(budget_module, "tool_schema_text", counted_schema)

    @dynamic_prompt
    def longer_each_call(request: Any) -> str:
        return "Be brief. " * (1 + 5 * len(request.messages))

    call = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"city": "Lyon"}, "id": "c1"}])
    model = ScriptedChatModel(replies=[call, "It is sunny.", "Bye."])
    budget = _Recording()
    agent = create_agent(
        model=model, tools=[lookup], middleware=[longer_each_call, budget], checkpointer=InMemorySaver()
    )
    _say(agent, "Weather in Lyon?")
    _say(agent, "Thanks")
    schema = [SystemMessage(content=tool_schema_text([lookup]))]
    assert len(model.calls) == 3 and len({len(sent[0].content) for sent in model.calls}) == 3
    assert budget.seen == [approximate_token_count([*sent, *schema]) for sent in model.calls]
    assert built == [1, 1, 1]  # one schema text per system prompt and tools: each call's prompt differs here
    budget.seen.clear()
    repeated = _Recording()
    same = create_agent(model=ScriptedChatModel(default="OK."), tools=[lookup], middleware=[repeated])
    built.clear()
    for text in ("one", "two", "three"):
        same.invoke({"messages": [HumanMessage(content=text)]}, _config("same"))
    assert len(repeated.seen) == 3 and built == [1]  # the same prompt and tools: built and counted once


def test_a_refusal_note_is_not_stored_as_the_assistants_words(ledger: Ledger, db_url: str) -> None:
    from remem.messages import is_refusal

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        card = ContextCardMiddleware(memory, thread_id="t1", user_id="maya")
        budget = BudgetMiddleware(
            ledger, budgets=Budgets(thread_tokens=60), prices=PRICES, budget_action="refuse"
        )
        model = ScriptedChatModel(default="Noted.")
        agent = create_agent(model=model, tools=[], middleware=[card, budget], checkpointer=InMemorySaver())
        _say(agent, "hello")
        out = _say(agent, "a much longer question that passes the thread budget of sixty tokens " * 2)
        _say(agent, "and one more")  # the card middleware stores what the state holds at each call
        assert is_refusal(out["messages"][-1]) and len(model.calls) == 1
        stored = [m.content for m in memory.get_thread("t1").messages()]
        assert "hello" in stored and "Noted." in stored
        assert not any("not sent" in text for text in stored)  # the note is the thread's, not the memory's
