"""The markers of the messages remem writes itself: derived text (summaries, context cards, recalls, prompts)
and refusal notes (a turn whose model call was not sent).

A derived message carries text that remem wrote (or recalled) itself, never a new turn of the user or
the assistant. It is sent to a model as labelled data, and it is never persisted as a turn of the thread
nor read by extraction (which is how a memory store fills with copies of itself)::

    message = mark_derived(HumanMessage(content=card_xml, name="memory_context_card"), source="card")
    is_derived(message)        # True
    derived_source(message)    # "card"

The mark is ``additional_kwargs["remem_derived"] = source``; it survives checkpoints and copies of the
message. Messages written before this marker existed are recognised by their names (a card or a recall
in a checkpointed state) or by the earlier ``remem_derived: True``, so an upgrade never stores them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeVar, get_args

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from remem.errors import ArgumentTypeError, RememUsageError

__all__ = [
    "DERIVED_KEY",
    "DERIVED_SOURCES",
    "REFUSAL_KEY",
    "DerivedSource",
    "derived_source",
    "is_derived",
    "is_refusal",
    "mark_derived",
    "mark_refusal",
    "persistable",
    "without_refusals",
]

DerivedSource = Literal["summary", "card", "recall", "memory", "prompt"]
"""``summary``: a rolling summary; ``card``: a context card; ``recall``: records recalled for a question;
``memory``: long-term memories shown to a model; ``prompt``: a prompt remem wrote to ask a model."""

DERIVED_SOURCES: Final[tuple[str, ...]] = get_args(DerivedSource)
DERIVED_KEY: Final = "remem_derived"

# Before the marker, cards and recalls (which a checkpointed state may hold) were known by their name.
_LEGACY_NAMES: Final = {
    "memory_context_card": "card",
    "memory_recall": "recall",
    "remem_recall": "recall",
    "remem_summary": "summary",
}

M = TypeVar("M", bound=BaseMessage)


def mark_derived(message: M, *, source: DerivedSource) -> M:
    """A copy of ``message`` marked as derived from ``source`` (the original is left as it was)."""
    if not isinstance(message, BaseMessage):
        raise ArgumentTypeError(f"mark_derived takes a LangChain message, got {type(message).__name__}")
    if source not in DERIVED_SOURCES:
        raise RememUsageError(f"source must be one of {', '.join(DERIVED_SOURCES)}; got {source!r}")
    kwargs = {**message.additional_kwargs, DERIVED_KEY: source}
    return message.model_copy(update={"additional_kwargs": kwargs})


def derived_source(message: object) -> str | None:
    """What ``message`` was derived from (one of :data:`DERIVED_SOURCES`), or None for a real turn."""
    if not isinstance(message, BaseMessage):
        return None
    mark = message.additional_kwargs.get(DERIVED_KEY)
    if isinstance(mark, str) and mark in DERIVED_SOURCES:
        return mark
    if mark:  # the marker of earlier versions, ``True``, or a source this version does not know
        return "memory"
    return _LEGACY_NAMES.get(message.name or "")


def is_derived(message: object) -> bool:
    """Whether ``message`` is text remem derived from memory: never a turn to persist or extract."""
    return derived_source(message) is not None


# -- refusals ------------------------------------------------------------------------------------------
# The other message remem writes itself: the note a turn ends with when its model call was not sent (not
# approved, or over a budget). It is remem's words to the person, never the model's: it is not sent to a
# model, not persisted as a turn, and a turn that ends with one made no model call.

REFUSAL_KEY: Final = "remem_not_approved"  # in ``response_metadata`` (kept by checkpoints and copies)

A = TypeVar("A", bound=AIMessage)


def mark_refusal(message: A) -> A:
    """A copy of ``message`` marked as a refusal note (the original is left as it was)."""
    if not isinstance(message, AIMessage):
        raise ArgumentTypeError(f"mark_refusal takes an AIMessage, got {type(message).__name__}")
    metadata = {**message.response_metadata, REFUSAL_KEY: True}
    return message.model_copy(update={"response_metadata": metadata})


def is_refusal(message: object) -> bool:
    """Whether ``message`` is a refusal note (:func:`mark_refusal`)."""
    return isinstance(message, AIMessage) and message.response_metadata.get(REFUSAL_KEY) is True


def without_refusals(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
    """``messages`` without the refusal notes (never sent to a model); ``messages`` itself when it holds
    none."""
    kept = [m for m in messages if not is_refusal(m)]
    return messages if len(kept) == len(messages) else kept


def _stable_id(role: str, text: str) -> str:
    return f"{role}-" + hashlib.sha256(f"{role}\x00{text}".encode("utf-8", "surrogatepass")).hexdigest()[:24]


def persistable(message: BaseMessage) -> dict[str, Any] | None:
    """The thread message to store for ``message``, or None for tool traffic, system and derived messages,
    and remem's refusal notes (a model call not sent: words to the person, not the assistant's).

    The id is the message's own; a message without one gets an id derived from its role and text, so
    the same turn sent again is still stored once.
    """
    if is_derived(message) or is_refusal(message):
        return None
    if isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, AIMessage) and not message.tool_calls:
        role = "assistant"
    else:
        return None
    text = message.text.strip()
    if not text:
        return None
    return {"role": role, "content": text, "id": str(message.id or _stable_id(role, text))}
