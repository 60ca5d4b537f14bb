"""Resume without paying twice on the middleware path: create_agent with BudgetMiddleware, alone and with
ContextCardMiddleware, on remem's SQLite and PostgreSQL checkpointers. A model call that fails after an
earlier call of the same run succeeded is resumed by invoking again, and the completed call (and the tool
it asked for) is not repeated: the model's and the tool's call counters say so, and so does the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from remem import Memory, checkpointer_from_url
from remem.middleware import BudgetMiddleware, ContextCardMiddleware
from remem.models import ScriptedChatModel
from remem.testing import offline_settings
from remem.usage import Budgets, Price, PriceTable, open_ledger

SETTINGS = offline_settings()
CONFIG: Any = {"configurable": {"thread_id": "t1", "user_id": "maya"}}


class Counted:
    def __init__(self) -> None:
        self.tool_calls = 0


@pytest.fixture
def counted() -> Iterator[Counted]:
    yield Counted()


def _agent(model: ScriptedChatModel, saver: Any, ledger: Any, counted: Counted, memory: Memory | None) -> Any:
    @tool
    def lookup(city: str) -> str:
        """Look up the weather of a city."""
        counted.tool_calls += 1
        return f"sunny in {city}"

    budget = BudgetMiddleware(
        ledger, budgets=Budgets(turn_tokens=100_000), prices=PriceTable({"scripted": Price(1, 2)})
    )
    middleware: list[Any] = [budget]
    if memory is not None:
        middleware.insert(0, ContextCardMiddleware(memory, thread_id="t1", user_id="maya"))
    return create_agent(model=model, tools=[lookup], middleware=middleware, checkpointer=saver)


@pytest.mark.parametrize("with_card", [False, True], ids=["budget", "card+budget"])
def test_a_failed_second_call_is_resumed_without_repeating_the_first(
    db_url: str, counted: Counted, with_card: bool
) -> None:
    call = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"city": "Lyon"}, "id": "c1"}])
    model = ScriptedChatModel(replies=[call, RuntimeError("provider down"), "It is sunny in Lyon."])
    memory = Memory.from_url(db_url, settings=SETTINGS) if with_card else None
    try:
        with checkpointer_from_url(db_url) as saver, open_ledger(db_url) as ledger:
            agent = _agent(model, saver, ledger, counted, memory)
            with pytest.raises(RuntimeError, match="provider down"):
                agent.invoke({"messages": [HumanMessage(content="Weather in Lyon?")]}, CONFIG)
            assert len(model.calls) == 2 and counted.tool_calls == 1
            assert ledger.spent(thread_id="t1").calls == 1  # the first call was paid and recorded once
            assert agent.get_state(CONFIG).next  # the run stopped before its model step finished

            # A new process would do the same: a fresh agent on the same database, invoked with None.
            again = _agent(model, saver, ledger, counted, memory)
            result = again.invoke(None, CONFIG)
            assert result["messages"][-1].text == "It is sunny in Lyon."
            assert len(model.calls) == 3  # the failed call was sent again; the first was not
            assert counted.tool_calls == 1  # nor was the tool it asked for
            assert model.calls[2] == model.calls[1]  # the retry sent what the failed call was to send
            assert any(isinstance(m, ToolMessage) for m in model.calls[2])
            events = ledger.events(thread_id="t1")
            assert [(e.turn, e.source) for e in events] == [(1, "provider"), (1, "provider")]
            assert ledger.spent(thread_id="t1").calls == 2
            state = again.get_state(CONFIG).values
            texts = [m.text for m in state["messages"]]
            assert texts.count("Weather in Lyon?") == 1 and texts.count("It is sunny in Lyon.") == 1
            assert state["remem_turn"] == 1

            # The next turn goes on normally: a new turn number, one more call.
            model.replies.append("You are welcome.")
            again.invoke({"messages": [HumanMessage(content="Thanks")]}, CONFIG)
            assert len(model.calls) == 4
            assert [e.turn for e in ledger.events(thread_id="t1")] == [1, 1, 2]
        if memory is not None:
            stored = memory.get_thread("t1").messages()
            ids = [m.id for m in stored]
            assert len(ids) == len(set(ids))  # the card middleware persisted each message once
            assert [m.content for m in stored].count("It is sunny in Lyon.") == 1
    finally:
        if memory is not None:
            memory.close()
