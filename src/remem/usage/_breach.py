"""What a model call that would pass a budget does, in remem's agent and in ``BudgetMiddleware`` alike.

The ``budget_action`` setting (or the parameter of either) is one of:

- ``error`` (the default): :class:`~remem.errors.BudgetExceededError` naming the budget, its limit, the
  amount and what to do; nothing is sent (remem's ``run_turn`` raises it before the input is stored).
- ``refuse``: the turn ends with a message naming the budget and the amount
  (:func:`~remem.usage._approval.refusal`); nothing is sent and the thread keeps every message.
- ``approve``: the run pauses as above an approval threshold, the interrupt carrying the estimate and
  the budget it would pass; yes sends the call anyway, no ends the turn as ``refuse`` does.
- ``compact``: the call is sent the newest messages that keep it within every budget (system messages
  and tool schemas always; starting on a user message, so the history stays provider-valid), and a
  warning says how many were left out; the thread keeps them all. When not even the latest user
  message fits, or the spending so far passes the budget alone, the error is raised.

Only the check before a call acts: a breach that only the provider's numbers show, after the call, is
logged (the reply was paid for and is kept) and the next call meets the budget before it is sent. Nothing
is ever cut silently: compacting is asked for by name, and says what it left out.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

from langchain_core.messages import AIMessage, BaseMessage

from remem.config import BUDGET_ACTIONS
from remem.errors import BudgetExceededError, ConfigError
from remem.messages import TokenCounter
from remem.strategies import trim_plan
from remem.usage._approval import Estimate, ask_approval, refusal
from remem.usage._records import Totals
from remem.usage.budgets import SCOPES, Budgets, Scope
from remem.usage.prices import Price

__all__ = [
    "BUDGET_ACTIONS",
    "cannot_fit",
    "check_budget_action",
    "fit_messages",
    "fitting_tokens",
    "refuse_or_ask",
]

log = logging.getLogger("remem.usage")


def check_budget_action(name: object) -> str:
    """``name`` checked: one of :data:`BUDGET_ACTIONS`, else :class:`~remem.errors.ConfigError`."""
    if name not in BUDGET_ACTIONS:
        raise ConfigError(
            f"unknown budget action {name!r}; use one of {', '.join(BUDGET_ACTIONS)} (REMEM_BUDGET_ACTION)"
        )
    return str(name)


def refuse_or_ask(action: str, breach: BudgetExceededError, estimate: Estimate) -> AIMessage | None:
    """For ``refuse`` and ``approve``: the message that ends the turn instead of the call, or None when a
    person approved it (asked with the estimate and the budget it would pass)."""
    asking = dataclasses.replace(estimate, over_budget=str(breach))
    if action == "approve" and ask_approval(asking):
        return None
    return refusal(asking, over_budget=str(breach) if action == "refuse" else None)


def fitting_tokens(budgets: Budgets, spent: Mapping[Scope, Totals], price: Price | None) -> float:
    """The most input tokens one call may be sent within every budget set, after what its scopes spent
    and what calls in flight hold of them (its output is unknown before it: counted as 0). A cost budget counts only for a priced model, as
    :func:`~remem.usage.budgets.check` does; ``inf`` when nothing limits the call."""
    allowed = math.inf
    for scope in SCOPES:
        before = spent.get(scope) if scope != "call" else None
        tokens_limit, cost_limit = budgets.limit(scope, "tokens"), budgets.limit(scope, "cost")
        if tokens_limit:
            used = 0 if before is None else before.tokens + before.held_tokens
            allowed = min(allowed, tokens_limit - used)
        if cost_limit and price is not None and price.input > 0:
            left = cost_limit - (0.0 if before is None else before.cost + before.held_cost)
            allowed = min(allowed, left * 1_000_000 / price.input)
    return allowed


def fit_messages(
    messages: Sequence[BaseMessage], allowed: float, count: TokenCounter, *, quiet: bool = False
) -> list[BaseMessage] | None:
    """The system messages and the newest of ``messages`` that take at most ``allowed`` tokens, from a user
    message on; None when not even the latest user message fits. A warning says what was left out,
    unless ``quiet`` (a check before the input is stored: the call itself says it)."""
    if allowed < 1:
        return None
    plan = trim_plan(messages, int(min(allowed, 2**62)), count)
    if plan.over_budget or not plan.kept:
        return None
    if plan.dropped and not quiet:
        log.warning(
            "a budget left room for %d tokens: the model call was sent the newest %d of %d messages "
            "(budget_action=compact; the thread keeps them all)",
            int(allowed),
            len(plan.system) + len(plan.kept),
            len(messages),
        )
    return [*plan.system, *plan.kept]


def cannot_fit(breach: BudgetExceededError) -> BudgetExceededError:
    """``breach`` again, saying that compacting could not fit the call either."""
    return BudgetExceededError(
        f"{breach}; budget_action=compact could not fit it either (not even the latest user message "
        "fits what is left)",
        budget=breach.budget,
        limit=breach.limit,
        amount=breach.amount,
        unit=breach.unit,
    )
