"""Approval before spending: the pause both remem's agent and ``BudgetMiddleware`` make above a threshold.

A model call whose counted estimate is above ``approval_token_threshold`` tokens or
``approval_cost_threshold`` (0 or None: never) pauses the run with a LangGraph ``interrupt`` carrying
:meth:`Estimate.as_dict` (``kind`` ``"remem.approval"``); the run is resumed with ``Command(resume=True)``
(send the call) or ``Command(resume=False)`` (end the turn with :func:`refusal`; nothing is sent), or
``{"approved": ...}``, or a "yes"/"no" text. :func:`pending_approval` reads a waiting pause from a
thread's state snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.types import interrupt

from remem.messages import is_refusal, mark_refusal, without_refusals

__all__ = [
    "APPROVAL_KIND",
    "Estimate",
    "approved",
    "ask_approval",
    "is_refusal",
    "needs_approval",
    "pending_approval",
    "refusal",
    "without_refusals",
]

APPROVAL_KIND = "remem.approval"


@dataclass(frozen=True)
class Estimate:
    """What a call is about to send, counted: what the approval interrupt carries."""

    model: str
    input_tokens: int
    cost: float | None
    thread_id: str | None
    user_id: str | None
    turn: int | None
    over_budget: str | None = None  # the budget the call would pass, when that is why it asks (budget_action)
    run_budgets: Mapping[str, float | None] | None = None  # the run's own budgets, for its resume

    def as_dict(self) -> dict[str, Any]:
        found = {
            "kind": APPROVAL_KIND,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "cost": self.cost,
            "thread": self.thread_id,
            "user": self.user_id,
            "turn": self.turn,
        }
        if self.over_budget is not None:
            found["over_budget"] = self.over_budget
        if self.run_budgets:
            found["run_budgets"] = dict(self.run_budgets)
        return found


def needs_approval(estimate: Estimate, tokens: int | None, cost: float | None) -> bool:
    """Whether ``estimate`` is above the token threshold ``tokens`` or the cost threshold ``cost``."""
    if tokens and estimate.input_tokens > tokens:
        return True
    return bool(cost and estimate.cost is not None and estimate.cost > cost)


def approved(answer: Any) -> bool:
    """Read a resume answer: True, ``{"approved": True}`` (or ``"approve"``) or a yes; anything else is no."""
    if isinstance(answer, Mapping):
        answer = answer.get("approved", answer.get("approve", False))
    return answer is True or (isinstance(answer, str) and answer.strip().lower() in ("y", "yes", "true"))


def ask_approval(estimate: Estimate) -> bool:
    """Pause the run for a yes/no on ``estimate`` (inside a graph node, with a checkpointer); the answer.

    On resume the node runs again from its start and this returns the answer instead of pausing, so
    nothing before it may have been sent.
    """
    return approved(interrupt(estimate.as_dict()))


def refusal(estimate: Estimate, *, over_budget: str | None = None) -> AIMessage:
    """The message a refused call ends the turn with: not approved, or not sent because it would pass
    the budget ``over_budget`` describes (budget_action ``refuse``)."""
    cost = "unknown cost" if estimate.cost is None else f"a cost of {estimate.cost:.6g}"
    size = f"about {estimate.input_tokens:,} input tokens, {cost}"
    why = (
        f"The model call was not sent ({size}): {over_budget}."
        if over_budget
        else f"The model call was not approved ({size}), so nothing was sent."
    )
    # not sent to a provider: the marker (remem.messages) says so
    return mark_refusal(
        AIMessage(content=f"{why} Your messages are kept; send another message to try again.")
    )


def pending_approval(snapshot: Any) -> dict[str, Any] | None:
    """The estimate of a model call that waits for approval in a thread's state snapshot (LangGraph's
    ``StateSnapshot``), or None."""
    for task in getattr(snapshot, "tasks", ()) or ():
        for pending in getattr(task, "interrupts", ()) or ():
            value = pending.value
            if isinstance(value, dict) and value.get("kind") == APPROVAL_KIND:
                return value
    return None
