"""Token and cost budgets per call, per turn, per thread and per user per day: pure checks.

A budget of 0 or None is no limit. :func:`check` is run twice per call: before it, with a counted estimate
of what will be sent (system prompt, tool schemas and messages; output unknown, so 0), and after it, with
the provider's numbers. ``spent`` holds what the turn, the thread and the user's day had spent before
this call (from the ledger), and what calls still in flight hold of them (:mod:`remem.usage._holds`). A breach raises :class:`~remem.errors.BudgetExceededError` naming the budget,
its limit, the amount and what to do; nothing is cut to fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Literal, cast

from remem.errors import ArgumentTypeError, BudgetExceededError, RememUsageError
from remem.usage._records import Totals

__all__ = ["BUDGETS_KEY", "SCOPES", "Budgets", "Scope", "check", "run_budgets"]

# The ``configurable`` key of a run's config that holds budgets for that run only (Budgets.merged).
BUDGETS_KEY = "remem_budgets"

Scope = Literal["call", "turn", "thread", "user_day"]
SCOPES: tuple[Scope, ...] = ("call", "turn", "thread", "user_day")

# The setting each budget is read from (the turn and thread token budgets are remem's older settings).
_SETTING = {
    ("call", "tokens"): "call_token_budget",
    ("call", "cost"): "call_cost_budget",
    ("turn", "tokens"): "turn_token_budget",
    ("turn", "cost"): "turn_cost_budget",
    ("thread", "tokens"): "session_token_budget",
    ("thread", "cost"): "session_cost_budget",
    ("user_day", "tokens"): "user_day_token_budget",
    ("user_day", "cost"): "user_day_cost_budget",
}
_ADVICE = {
    "call": "send less (a trim or summary strategy, a compaction trigger lower, fewer tools) or raise it",
    "turn": "end the turn with fewer model calls or tool rounds, or raise it",
    "thread": "start a new thread, or raise it",
    "user_day": "wait for the next UTC day, or raise it",
}
_WHAT = {
    "call": "this call",
    "turn": "this turn",
    "thread": "this thread",
    "user_day": "this user today (UTC)",
}


@dataclass(frozen=True)
class Budgets:
    """Limits in tokens (input + output) and in cost (the prices' currency); 0 or None: no limit."""

    call_tokens: int | None = None
    call_cost: float | None = None
    turn_tokens: int | None = None
    turn_cost: float | None = None
    thread_tokens: int | None = None
    thread_cost: float | None = None
    user_day_tokens: int | None = None
    user_day_cost: float | None = None

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> Budgets:
        """The budgets of a :class:`~remem.config.Settings`, with ``overrides`` (e.g. ``turn_cost=0.05``)."""
        values = {
            f"{scope}_{unit}": getattr(settings, _SETTING[(scope, unit)], None) or None
            for scope in SCOPES
            for unit in ("tokens", "cost")
        }
        return cls(**{**values, **overrides})

    def merged(self, given: object) -> Budgets:
        """These budgets with those given for one run over them (:func:`run_budgets`); None: these."""
        changes = run_budgets(given)
        return dataclasses.replace(self, **cast("dict[str, Any]", changes)) if changes else self

    @cached_property
    def _limits(self) -> dict[tuple[str, str], float | None]:  # read at every check: built once
        return {(s, u): getattr(self, f"{s}_{u}") or None for s in SCOPES for u in ("tokens", "cost")}

    def limit(self, scope: Scope, unit: str) -> float | None:
        return self._limits[(scope, unit)]

    @cached_property
    def active(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @cached_property
    def _set(self) -> tuple[tuple[Scope, str, float], ...]:  # the limits a check compares: built once
        return tuple((cast("Scope", s), u, limit) for (s, u), limit in self._limits.items() if limit)

    @cached_property
    def read_scopes(self) -> tuple[Scope, ...]:
        """The scopes whose spending a check needs from the ledger (read only when it matters)."""
        return tuple(scope for scope in SCOPES if scope != "call" and self.needs(scope))

    def needs(self, scope: Scope) -> bool:
        """Whether a check needs what ``scope`` spent (so the ledger is read only when it matters)."""
        return bool(self.limit(scope, "tokens") or self.limit(scope, "cost"))


def run_budgets(given: object) -> dict[str, float | None] | None:
    """The budgets given for one run, checked, as the limits they set: a :class:`Budgets` (its limits that
    are set) or a mapping of limit names (``{"turn_cost": 0.05}``; a None or 0 there lifts that limit for
    the run); None: none. A run's config carries them as ``configurable["remem_budgets"]``
    (:data:`BUDGETS_KEY`), as ``run_turn(..., budgets=...)`` puts them; an approval's pause keeps them, so
    that the resumed call is checked against the same budgets."""
    if given is None:
        return None
    if isinstance(given, Budgets):
        return {f.name: value for f in fields(given) if (value := getattr(given, f.name))}
    if not isinstance(given, Mapping):
        raise ArgumentTypeError(
            f"{BUDGETS_KEY} takes a Budgets or a mapping such as {{'turn_cost': 0.05}}; got {given!r}"
        )
    names = [f.name for f in fields(Budgets)]
    unknown = sorted(str(key) for key in given if key not in names)
    if unknown:
        raise RememUsageError(
            f"unknown budget {', '.join(unknown)} in {BUDGETS_KEY}; the budgets are {', '.join(names)}"
        )
    for name, value in given.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ArgumentTypeError(f"budget {name} is a number of 0 or more (0: no limit); got {value!r}")
    return dict(given)


def _amount(unit: str, value: float) -> str:
    return f"{int(value):,} tokens" if unit == "tokens" else f"{value:.6g}"


def check(
    budgets: Budgets,
    *,
    tokens: int,
    cost: float | None,
    spent: Mapping[Scope, Totals],
    estimated: bool,
) -> None:
    """Raise :class:`BudgetExceededError` when this call (``tokens``, ``cost``) passes any budget.

    ``cost`` None (an unpriced model) passes the cost budgets of the call, and its scopes count only the
    priced calls: the one-time price warning says so, and nothing is guessed.
    """
    for scope, unit, limit in budgets._set:  # only the budgets set: run twice per model call
        mine: float | None = float(tokens) if unit == "tokens" else cost
        if mine is None:
            continue
        before = spent.get(scope) if scope != "call" else None
        held = 0.0 if before is None else (before.held_tokens if unit == "tokens" else before.held_cost)
        earlier = 0.0 if before is None else (before.tokens if unit == "tokens" else before.cost)
        total = earlier + held + mine
        if total <= limit:
            continue
        setting = _SETTING[(scope, unit)]
        how = "would need" if estimated else "used"
        running = f", {_amount(unit, held)} held by calls still running" if held else ""
        detail = (
            f"{_amount(unit, mine)} for this call"
            if scope == "call"
            else f"{_amount(unit, earlier)} spent{running} and {_amount(unit, mine)} for this call"
        )
        counted = "counted before the call" if estimated else "as the provider reported it"
        raise BudgetExceededError(
            f"{_WHAT[scope]} {how} {_amount(unit, total)} ({detail}, {counted}), over the {setting} of "
            f"{_amount(unit, limit)} (REMEM_{setting.upper()}); {_ADVICE[scope]}",
            budget=setting,
            limit=float(limit),
            amount=float(total),
            unit=unit,
        )
