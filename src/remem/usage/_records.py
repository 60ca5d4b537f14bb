"""What the ledger stores: one :class:`UsageEvent` per model call, and :class:`Totals` of many."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

__all__ = [
    "KINDS",
    "SOURCES",
    "Kind",
    "Source",
    "Totals",
    "UsageEvent",
    "call_id_of",
    "day_of",
    "usage_from_metadata",
]

Kind = Literal["chat", "summariser", "extractor", "embedder"]
Source = Literal["provider", "counted"]
KINDS: tuple[Kind, ...] = ("chat", "summariser", "extractor", "embedder")
SOURCES: tuple[Source, ...] = ("provider", "counted")


def day_of(at: float) -> str:
    """The UTC calendar day of an epoch time, ``YYYY-MM-DD``: the unit of the per-user daily budgets."""
    return _day(int(at // 86400))


@lru_cache(maxsize=64)
def _day(days: int) -> str:  # every call of a day gives the same string: formatted once
    return datetime.fromtimestamp(days * 86400, UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class UsageEvent:
    """One model call: who made it, what it cost.

    ``source`` says whether the token numbers are the provider's (``usage_metadata``) or counted by remem.
    ``cost`` is None when the model has no price in the configuration (never a guess). ``call_id``, when
    given, makes recording idempotent: a resumed run that records the same call again adds nothing.
    """

    kind: Kind
    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    source: Source = "provider"
    thread_id: str | None = None
    user_id: str | None = None
    turn: int | None = None
    node: str | None = None
    latency_ms: float | None = None
    cost: float | None = None
    at: float = field(default_factory=time.time)
    call_id: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def day(self) -> str:
        return day_of(self.at)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "thread": self.thread_id,
            "user": self.user_id,
            "turn": self.turn,
            "node": self.node,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "source": self.source,
            "latency_ms": self.latency_ms,
            "cost": self.cost,
            "at": datetime.fromtimestamp(self.at, UTC).isoformat(timespec="milliseconds"),
            "call_id": self.call_id,
        }


@dataclass(frozen=True)
class Totals:
    """The sum of some calls. ``cost`` sums the priced calls only; ``unpriced`` counts the others, so a
    total is never shown as complete when part of it is unknown. ``held_tokens`` and ``held_cost``: what
    calls still in flight hold of the scope's budgets (what a budget check reads; 0 in every report)."""

    key: Any = None  # the group: a model, a thread, a day...; (thread, turn) by turn
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0
    latency_ms: float = 0.0
    held_tokens: int = 0
    held_cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def priced_cost(self) -> float | None:
        """``cost`` when at least one call was priced; None when none was (or no call was made)."""
        return self.cost if self.calls > self.unpriced else None

    def __add__(self, other: Totals) -> Totals:
        """The sum of both (under this one's ``key``): one group's totals gathered from several rows."""
        return Totals(
            self.key,
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost + other.cost,
            self.unpriced + other.unpriced,
            self.latency_ms + other.latency_ms,
            self.held_tokens + other.held_tokens,
            self.held_cost + other.held_cost,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": list(self.key) if isinstance(self.key, tuple) else self.key,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "tokens": self.tokens,
            "cost": self.priced_cost,
            "unpriced_calls": self.unpriced,
            "latency_ms": round(self.latency_ms, 2),
        }


def call_id_of(thread_id: str | None, reply_id: object) -> str | None:
    """The id of a chat call in the ledger, ``thread:reply id``: the one scheme of remem's agent,
    ``BudgetMiddleware``, the extractor and :class:`~remem.usage.UsageRecorder`, so a call that two of them
    see is recorded once (None: the call has no thread or its reply no id)."""
    return f"{thread_id}:{reply_id}" if thread_id and isinstance(reply_id, str) and reply_id else None


def usage_from_metadata(meta: Any) -> tuple[int, int, int] | None:
    """(input, output, cached input) tokens from a LangChain ``usage_metadata``; None when it has none."""
    if not meta:
        return None
    try:
        inp = int(meta.get("input_tokens") or 0)
        out = int(meta.get("output_tokens") or 0)
        details = meta.get("input_token_details") or {}
        cached = int(details.get("cache_read") or 0)
    except (AttributeError, TypeError, ValueError):
        return None
    if inp == 0 and out == 0:
        return None
    return inp, out, cached
