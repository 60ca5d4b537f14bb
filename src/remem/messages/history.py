"""What makes a history acceptable to a model provider, and where it may be cut.

A provider-valid history:
- has system messages only at its start;
- does not start (after the system messages) with a tool result;
- follows every AI message that calls tools with all of that message's results, right after it;
- has no tool result without its call just before it.

In such a history a cut at ``i`` (keep ``messages[i:]``) is safe exactly when ``messages[i]`` is not
a tool result: results sit right after their call, so nothing before ``i`` waits for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import convert_to_messages

from remem.errors import InvalidMessagesError
from remem.messages.derived import is_derived

__all__ = [
    "DEFAULT_MAX_MESSAGE_CHARS",
    "check_can_append",
    "check_provider_valid",
    "coerce_messages",
    "history_problems",
    "is_provider_valid",
    "is_retry",
    "last_human_index",
    "retried_copy",
    "safe_cut_at_or_before",
    "system_prefix_length",
    "unanswered",
]

DEFAULT_MAX_MESSAGE_CHARS = 100_000


def system_prefix_length(messages: Sequence[BaseMessage]) -> int:
    """How many system messages open the history."""
    n = 0
    while n < len(messages) and isinstance(messages[n], SystemMessage):
        n += 1
    return n


def history_problems(messages: Sequence[BaseMessage], *, allow_pending_calls: bool = False) -> list[str]:
    """Every reason a provider would reject this history; empty when it is valid.

    ``allow_pending_calls`` accepts a history that ends on tool calls still waiting for their results,
    as a graph's state does in the middle of a tool loop.
    """
    problems, ending = _problems(messages)
    return problems if allow_pending_calls or ending is None else [*problems, ending]


def _problems(messages: Sequence[BaseMessage]) -> tuple[list[str], str | None]:
    """The problems of ``messages`` with pending calls allowed, and the one their end adds if they are not."""
    problems: list[str] = []
    start = system_prefix_length(messages)
    if start < len(messages) and isinstance(messages[start], ToolMessage):
        problems.append(f"message {start} is a tool result at the start of the history")
    open_calls: set[str] = set()  # calls of the last AI message still waiting for a result
    answered: set[str] = set()
    for i, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_calls:
                why = "answered twice" if message.tool_call_id in answered else "has no call just before it"
                problems.append(f"message {i} is a tool result for {message.tool_call_id!r}, which {why}")
            open_calls.discard(message.tool_call_id)
            answered.add(message.tool_call_id)
            continue
        if open_calls:
            problems.append(f"message {i} comes before the results of tool calls {sorted(open_calls)}")
            open_calls = set()
        if i >= start and isinstance(message, SystemMessage):
            problems.append(f"message {i} is a system message after the start of the history")
        if isinstance(message, AIMessage) and message.tool_calls:
            open_calls = {str(call["id"]) for call in message.tool_calls}
            answered = set()
    ending = f"the history ends before the results of tool calls {sorted(open_calls)}" if open_calls else None
    return problems, ending


def appended_problems(
    history: Sequence[BaseMessage], new: Sequence[BaseMessage]
) -> tuple[list[BaseMessage], list[str], list[str]]:
    """``history`` with ``new`` appended (LangGraph's ``add_messages``), merged and scanned once: the
    merged list, its problems with pending tool calls allowed, and without."""
    from langgraph.graph.message import add_messages

    merged: list[BaseMessage] = add_messages(list(history), list(new))  # type: ignore[arg-type,assignment]
    problems, ending = _problems(merged)
    return merged, problems, problems if ending is None else [*problems, ending]


def is_provider_valid(messages: Sequence[BaseMessage]) -> bool:
    return not history_problems(messages)


def check_provider_valid(messages: Sequence[BaseMessage]) -> None:
    """Raise :class:`InvalidMessagesError` listing every problem, if there is one."""
    problems = history_problems(messages)
    if problems:
        raise InvalidMessagesError(
            "the history is not provider-valid: "
            + "; ".join(problems[:5])
            + ("; …" if len(problems) > 5 else "")
            + ". Send every tool result right after the AI message that called it."
        )


def check_can_append(history: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> None:
    """Raise :class:`InvalidMessagesError` if appending ``new`` would break a valid ``history``.

    Call it before writing, so that a malformed input leaves the stored thread as it was.
    """
    _, problems, _ = appended_problems(history, new)
    refuse_append(history, problems)


def refuse_append(history: Sequence[BaseMessage], problems: Sequence[str]) -> None:
    """:func:`check_can_append`'s refusal, given the problems of the merged history (pending calls allowed)."""
    if problems and not history_problems(history, allow_pending_calls=True):
        raise InvalidMessagesError(
            "these messages would make the thread's history invalid: "
            + "; ".join(problems[:3])
            + ". Send each tool result right after the AI message that called it; the thread was not changed"
        )


def safe_cut_at_or_before(messages: Sequence[BaseMessage], index: int, floor: int = 0) -> int:
    """The largest safe cut point ``<= index`` and ``>= floor`` (``floor`` itself when none is)."""
    i = min(max(index, floor), len(messages))
    while i > floor and i < len(messages) and isinstance(messages[i], ToolMessage):
        i -= 1
    return i


def last_human_index(messages: Sequence[BaseMessage]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


def coerce_messages(
    value: Any, *, max_chars: int = DEFAULT_MAX_MESSAGE_CHARS, allow_empty: bool = False
) -> list[BaseMessage]:
    """Turn user input (text, dicts with ``role``/``content``, tuples, messages) into messages.

    Raises :class:`InvalidMessagesError` naming the offending item and what to send instead.
    """
    items: Iterable[Any] = [value] if isinstance(value, str | BaseMessage | dict) else value
    if not isinstance(items, list | tuple):
        raise InvalidMessagesError(
            f"expected a message, a text or a list of them, got {type(value).__name__}"
        )
    messages: list[BaseMessage] = []
    for n, item in enumerate(items):
        if isinstance(item, str):
            item = HumanMessage(content=item)
        try:
            (message,) = convert_to_messages([item])
        except (ValueError, TypeError, NotImplementedError, KeyError) as exc:
            raise InvalidMessagesError(
                f"message {n} cannot be read ({exc}); send a dict such as "
                "{'role': 'user', 'content': 'text'} or a LangChain message"
            ) from None
        size = len(message.text) if isinstance(message.content, str | list) else 0
        if size > max_chars:
            raise InvalidMessagesError(
                f"message {n} has {size:,} characters, over the limit of {max_chars:,} "
                "(REMEM_MAX_MESSAGE_CHARS); split it, store it as a document, or raise the limit"
            )
        messages.append(message)
    if not messages and not allow_empty:
        raise InvalidMessagesError("no message was given; send at least one message with some text")
    for n, message in enumerate(messages):
        if isinstance(message, HumanMessage) and not message.text.strip():
            raise InvalidMessagesError(f"message {n} is empty; send some text")
    return messages


def unanswered(messages: Sequence[BaseMessage]) -> HumanMessage | None:
    """The latest user message of ``messages`` when no reply ends its turn yet (a turn a failure cut short
    after its input was stored: tool calls and results may follow it, no final reply); else None.
    Derived messages (cards, recalls) are not the user's; a refusal note ends a turn as a reply does."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) and not is_derived(message):
            return message
        if isinstance(message, AIMessage) and not message.tool_calls:
            return None
    return None


def is_retry(history: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> bool:
    """Whether ``new`` sends again, alone, the user message of ``history``'s unanswered turn (the same
    content): a retry after a failure, which finishes the kept turn instead of adding a copy of it."""
    if len(new) != 1 or not isinstance(new[0], HumanMessage):
        return False
    kept = unanswered(history)
    return kept is not None and kept.content == new[0].content


def retried_copy(messages: Sequence[BaseMessage]) -> HumanMessage | None:
    """The latest message of ``messages`` when it is a retry (:func:`is_retry`) of the unanswered user
    message before it: the copy to drop (a plain ``invoke`` of the same text after a failure); else None."""
    last = messages[-1] if messages else None
    if isinstance(last, HumanMessage) and is_retry(messages[:-1], [last]):
        return last
    return None
