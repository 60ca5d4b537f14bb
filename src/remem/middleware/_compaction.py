"""When and where to compact a prompt with a context card. Pure: no store, no model.

- Which messages are turns worth persisting (user messages, and assistant replies that call no tool).
- How many tokens a model call will take: the system prompt and the tool schemas count, as well as the
  messages (LangChain's ``SummarizationMiddleware`` counts the messages only, langchain#34664). The card
  message itself is left out of both persistence and the count.
- Where the raw tail starts: never on a tool result (a tool call and its results stay together), and never
  after the latest user message (the question being answered is always sent).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from remem.errors import RememUsageError
from remem.messages import (
    TokenCounter,
    is_derived,
    is_refusal,
    last_human_index,
    safe_cut_at_or_before,
    system_prefix_length,
)

__all__ = [
    "PATTERNS",
    "PLACEHOLDER_CARD",
    "CompactionPlan",
    "Pattern",
    "check_settings",
    "latest_question",
    "organic_messages",
    "persistable",
    "plan_compaction",
    "prompt_tokens",
    "tool_schema_text",
    "with_recall",
]

Pattern = Literal["external_tail", "self_contained"]
PATTERNS: tuple[str, ...] = ("external_tail", "self_contained")
PLACEHOLDER_CARD = "<context_card>\n<note>No earlier context yet.</note>\n</context_card>"


def check_settings(trigger: int, kept: int, pattern: str) -> None:
    if trigger <= 0:
        raise RememUsageError(
            "compaction_token_trigger must be positive: the prompt size that calls for a card"
        )
    if kept < 0:
        raise RememUsageError("kept_message_count must be non-negative (raw messages kept after the card)")
    if pattern not in PATTERNS:
        raise RememUsageError(f"pattern must be one of {', '.join(PATTERNS)}; got {pattern!r}")


def organic_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The conversation without the derived messages (cards, recalls, summaries) remem injected."""
    return [m for m in messages if not is_derived(m)]


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


def tool_schema_text(tools: Sequence[Any]) -> str:
    """The tool schemas as the provider receives them (JSON), to be counted toward the prompt."""
    schemas = []
    for tool in tools:
        try:
            schemas.append(convert_to_openai_tool(tool))
        except (TypeError, ValueError, NotImplementedError):
            schemas.append({"tool": str(tool)})
    return json.dumps(schemas, sort_keys=True, default=str) if schemas else ""


def prompt_tokens(
    messages: Sequence[BaseMessage],
    *,
    system: SystemMessage | None,
    tools: Sequence[Any],
    count: TokenCounter,
) -> int:
    """Tokens of a model call: system prompt + tool schemas + the organic messages (no card)."""
    counted: list[BaseMessage] = [] if system is None else [system]
    counted += organic_messages(messages)
    schema = tool_schema_text(tools)
    if schema:
        counted.append(SystemMessage(content=schema))
    return count(counted)


@dataclass(frozen=True)
class CompactionPlan:
    """How to compact: the card covers all but the last ``except_last`` stored turns.

    The compacted history is ``[*system, card, *after_card]``. ``max_recent`` is 0 for the external tail
    (``after_card`` is the raw tail) and ``except_last`` for the self-contained card, which holds the
    tail's turns (``after_card`` is then only a trailing tool exchange still waiting for the model).
    """

    except_last: int
    max_recent: int
    system: tuple[BaseMessage, ...]
    after_card: tuple[BaseMessage, ...]
    tail: tuple[BaseMessage, ...]


def plan_compaction(messages: Sequence[BaseMessage], kept: int, pattern: str) -> CompactionPlan | None:
    """Where to cut the organic ``messages``; None when nothing would be left for the card to cover."""
    raw = organic_messages(messages)
    prefix = system_prefix_length(raw)
    system, body = tuple(raw[:prefix]), raw[prefix:]
    start = safe_cut_at_or_before(body, len(body) - kept)
    question = last_human_index(body)
    if question is not None:
        start = min(start, question)  # the latest user message is never folded away
    if start <= 0:
        return None
    tail = tuple(body[start:])
    stored = [i for i, m in enumerate(tail) if persistable(m) is not None]
    if pattern == "external_tail":
        return CompactionPlan(len(stored), 0, system, after_card=tail, tail=tail)
    rest = stored[-1] + 1 if stored else 0
    return CompactionPlan(len(stored), len(stored), system, after_card=tail[rest:], tail=tail)


def with_recall(messages: Sequence[BaseMessage], recall: BaseMessage) -> list[BaseMessage]:
    """``messages`` with ``recall`` right after the latest user message (the prefix before it is unchanged,
    so a provider's prompt cache still holds)."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        if isinstance(out[i], HumanMessage) and not is_derived(out[i]):
            out.insert(i + 1, recall)
            return out
    out.append(recall)
    return out


def latest_question(messages: Sequence[BaseMessage]) -> str | None:
    """The text of the latest user message (not a derived one), if any."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) and not is_derived(message) and message.text.strip():
            return message.text
    return None
