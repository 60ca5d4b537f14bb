"""The one call every model-calling part makes to record into the ledger: :class:`Meter`.

    meter = Meter(ledger, PriceTable.from_settings_rows(settings.prices))
    started = time.perf_counter()
    reply = model.invoke(messages)
    meter.record_reply("summariser", model_name(model), messages, reply, started=started,
                       thread_id="t1", user_id="maya", turn=7, node="summarise")

The provider's ``usage_metadata`` is used when the reply carries it (``source="provider"``); otherwise the
tokens are counted (``source="counted"``). The cost comes from the price table (None when unpriced).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from remem.errors import ArgumentTypeError, RememUsageError
from remem.messages import TokenCounter, approximate_token_count
from remem.usage._base import Ledger
from remem.usage._records import KINDS, SOURCES, Kind, Source, UsageEvent, usage_from_metadata
from remem.usage.prices import PriceTable

__all__ = ["Meter"]


def _check_count(value: object, name: str, example: int) -> None:
    # A bool is an int to Python but a slip here; a negative count would lower every total it joins.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} is a whole number such as {name}={example}; got {value!r}")
    if value < 0:
        raise RememUsageError(f"{name} must be 0 or more; got {value}")


def _check_event(
    kind: object,
    model: object,
    source: object,
    counts: Mapping[str, object],
    labels: Mapping[str, object],
    latency_ms: object,
) -> None:
    """Refuse what would write a wrong row into the ledger: an unknown kind or source, a model or label
    that is not a text, a token count or turn that is not a whole number of 0 or more, a latency that is
    not a number of 0 or more."""
    if kind not in KINDS:
        raise RememUsageError(f"usage kind {kind!r} is unknown; use one of {', '.join(KINDS)}")
    if source not in SOURCES:
        raise RememUsageError(f"usage source {source!r} is unknown; use one of {', '.join(SOURCES)}")
    if not isinstance(model, str):
        raise ArgumentTypeError(f"model is the model's name, a str such as 'gpt-4o-mini'; got {model!r}")
    for name, value in counts.items():
        if value is not None or name != "turn":
            _check_count(value, name, 3 if name == "turn" else 120)
    for name, value in labels.items():
        if value is not None and not isinstance(value, str):
            raise ArgumentTypeError(f"{name} is a text (str) or None; got {type(value).__name__} {value!r}")
    if latency_ms is not None:
        if isinstance(latency_ms, bool) or not isinstance(latency_ms, int | float):
            raise ArgumentTypeError(f"latency_ms is a number of milliseconds or None; got {latency_ms!r}")
        if latency_ms < 0:
            raise RememUsageError(f"latency_ms must be 0 or more; got {latency_ms!r}")


class Meter:
    """A ledger, the prices and a token counter: turns a model call into a priced :class:`UsageEvent`."""

    def __init__(
        self, ledger: Ledger, prices: PriceTable | None = None, *, count: TokenCounter | None = None
    ) -> None:
        self.ledger = ledger
        self.prices = prices or PriceTable()
        self.count = count or approximate_token_count

    def event(
        self,
        kind: Kind,
        model: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        source: Source = "provider",
        thread_id: str | None = None,
        user_id: str | None = None,
        turn: int | None = None,
        node: str | None = None,
        latency_ms: float | None = None,
        call_id: str | None = None,
    ) -> UsageEvent:
        """A priced event (not recorded). An unknown ``kind`` or ``source``, a token count or ``turn`` that
        is not a whole number of 0 or more, a label that is not a str: a :class:`~remem.errors.RememUsageError`
        (an :class:`~remem.errors.ArgumentTypeError` for a wrong type), and nothing is recorded."""
        counts = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cached_tokens": cached_tokens,
            "turn": turn,
        }
        labels = {"thread_id": thread_id, "user_id": user_id, "node": node, "call_id": call_id}
        _check_event(kind, model, source, counts, labels, latency_ms)
        return UsageEvent(
            kind=kind,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            source=source,
            thread_id=thread_id,
            user_id=user_id,
            turn=turn,
            node=node,
            latency_ms=None if latency_ms is None else round(latency_ms, 3),
            cost=self.prices._cost(model, input_tokens, output_tokens, cached_tokens),  # counts checked above
            call_id=call_id,
        )

    def record(self, kind: Kind, model: str, **fields: Any) -> UsageEvent:
        """Price and record one call (the keyword arguments of :meth:`event`); returns the event."""
        event = self.event(kind, model, **fields)
        self.ledger.record(event)
        return event

    def reply_event(
        self,
        kind: Kind,
        model: str,
        sent: Sequence[BaseMessage],
        reply: BaseMessage,
        *,
        started: float | None = None,
        counted_input: int | Callable[[], int] | None = None,
        **fields: Any,
    ) -> UsageEvent:
        """The event of a chat call that sent ``sent`` and got ``reply`` (``started``: perf_counter).
        ``counted_input``: what the caller counts the prompt as (a budget check's estimate, tool schemas
        included), or a function that counts it; used when the reply carries no provider usage (None:
        ``sent`` is counted)."""
        usage = usage_from_metadata(getattr(reply, "usage_metadata", None))
        source: Source = "counted" if usage is None else "provider"
        if usage is not None:
            inp, out, cached = usage
        else:
            counted = counted_input if counted_input is not None else lambda: self.count(sent)
            inp = counted() if callable(counted) else counted
            out, cached = self.count([reply]), 0
        latency = None if started is None else (time.perf_counter() - started) * 1000
        fields.setdefault("latency_ms", latency)
        return self.event(
            kind, model, input_tokens=inp, output_tokens=out, cached_tokens=cached, source=source, **fields
        )

    def record_reply(
        self,
        kind: Kind,
        model: str,
        sent: Sequence[BaseMessage],
        reply: BaseMessage,
        *,
        started: float | None = None,
        **fields: Any,
    ) -> UsageEvent:
        """Record a chat call (see :meth:`reply_event`); returns the event."""
        event = self.reply_event(kind, model, sent, reply, started=started, **fields)
        self.ledger.record(event)
        return event

    def record_texts(
        self, kind: Kind, model: str, texts: Sequence[str], *, started: float | None = None, **fields: Any
    ) -> UsageEvent:
        """Record an embedder batch of ``texts`` (counted: embedders report no usage)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            # One text would be counted as a batch of its characters.
            raise ArgumentTypeError(f"texts is a list of the texts embedded, e.g. ['tea']; got {texts!r}")
        tokens = sum(len(t) for t in texts) // 4 + len(texts)  # the approximate counter's rule, no messages
        latency = None if started is None else (time.perf_counter() - started) * 1000
        fields.setdefault("latency_ms", latency)
        return self.record(kind, model, input_tokens=tokens, output_tokens=0, source="counted", **fields)
