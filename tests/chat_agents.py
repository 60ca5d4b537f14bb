"""Graphs for ``remem chat --agent tests.chat_agents:FUNCTION`` in tests: create_agent with BudgetMiddleware."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent

from remem.middleware import BudgetMiddleware
from remem.models import ScriptedChatModel
from remem.usage import ledger_from_url


def approval_agent(*, checkpointer: Any, settings: Any) -> Any:
    """Every model call asks for approval (above 1 token); calls are recorded in the thread's database."""
    model = ScriptedChatModel(default=lambda messages: f"Reply to: {messages[-1].text}")
    budget = BudgetMiddleware(ledger_from_url(settings.database_url), approve_tokens=1)
    return create_agent(model=model, tools=[], middleware=[budget], checkpointer=checkpointer)


def over_budget_agent(*, checkpointer: Any, settings: Any) -> Any:
    """Every model call passes its 1-token call budget and asks for approval (budget_action approve)."""
    from remem.usage import Budgets

    model = ScriptedChatModel(default=lambda messages: f"Reply to: {messages[-1].text}")
    budget = BudgetMiddleware(
        ledger_from_url(settings.database_url), budgets=Budgets(call_tokens=1), budget_action="approve"
    )
    return create_agent(model=model, tools=[], middleware=[budget], checkpointer=checkpointer)
