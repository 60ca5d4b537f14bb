"""Counting a thread's prompt once: each call counts only the messages added since the thread's last call.

Used by both budget checkers (remem's agent and ``BudgetMiddleware``), so that a long thread's calls do not
re-count the whole history; the total is the same as counting it all.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from remem.messages import TokenCounter, approximate_token_count, counter_for_model

__all__ = ["PrefixCounter", "signatures", "sums_per_message"]

_PREFIXES_KEPT = 256  # threads whose last counted prompt a counter remembers


@dataclass
class _Counted:
    """The messages of a thread's last counted call: their signatures and running token totals."""

    signatures: list[tuple[Any, ...]]
    totals: list[int]


# What a message's count is keyed on: its id and its content, read from the model's __dict__ in C (pydantic's
# attribute lookup, and a Python function per message, cost about as much as counting the message).
_SIGNATURE = operator.itemgetter("id", "content")
_FIELDS = operator.attrgetter("__dict__")


def signatures(messages: Sequence[BaseMessage]) -> list[tuple[Any, ...]]:
    """What each message's count is keyed on (its id and content): equal lists count the same."""
    return list(map(_SIGNATURE, map(_FIELDS, messages)))


def sums_per_message(counter: TokenCounter, model: str | None = None) -> bool:
    """Whether ``counter`` is one of remem's, which count each message on its own (a sum over messages):
    the approximate counter, or ``model``'s exact one (:func:`~remem.messages.counter_for_model`). A
    counter of the caller's may not be, and is always given the whole prompt."""
    return counter is approximate_token_count or (model is not None and counter is counter_for_model(model))


class PrefixCounter:
    """Counts a thread's prompt by reusing the count of the longest unchanged prefix of its last call.

    A thread's prompt mostly grows at the end, so each call counts only its new messages; a message
    removed, replaced or edited (same id, other content) has another signature, and everything from it on
    is counted again, except the messages the last call counted (an edit that keeps the id and the text and changes only an AI message's tool calls
    is not seen: its old count stands until the prompt changes before it). Only for counters that count
    each message on its own (:func:`sums_per_message`), so the total is the same as counting the whole list.
    """

    def __init__(self, count: TokenCounter) -> None:
        self.count = count
        self._last: OrderedDict[Hashable, _Counted] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, key: Hashable, messages: Sequence[BaseMessage]) -> int:
        signed = signatures(messages)
        with self._lock:
            last = self._last.pop(key, None)
        same = 0
        if last is not None:
            same = min(len(last.signatures), len(signed))
            if signed[:same] != last.signatures[:same]:
                # Find where they part (rare: a compaction or an edit), halving the range each step.
                low, high = 0, same
                while low < high:
                    middle = (low + high + 1) // 2
                    if signed[:middle] == last.signatures[:middle]:
                        low = middle
                    else:
                        high = middle - 1
                same = low
        totals = last.totals[:same] if last is not None else []
        running = totals[-1] if totals else 0
        # After the prefix, a message the last call counted is not counted again (a view that slides: its
        # oldest messages drop out, the rest move up).
        before = (
            {}
            if last is None or same == len(last.signatures)
            else {
                signature: total - (last.totals[i - 1] if i else 0)
                for i, (signature, total) in enumerate(zip(last.signatures, last.totals, strict=True))
                if i >= same
            }
        )
        for signature, message in zip(signed[same:], messages[same:], strict=True):
            counted = before.get(signature)
            running += self.count([message]) if counted is None else counted
            totals.append(running)
        with self._lock:
            self._last[key] = _Counted(signed, totals)
            while len(self._last) > _PREFIXES_KEPT:
                self._last.popitem(last=False)
        return running
