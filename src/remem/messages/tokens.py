"""Token counting: an approximate counter that needs nothing, and exact ones from offline BPE files."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.utils.function_calling import convert_to_openai_tool

from remem.errors import ConfigError, MissingDependencyError

__all__ = [
    "TokenCounter",
    "approximate_token_count",
    "chat_token_counter",
    "counter_for_model",
    "encoding_for_model",
    "exact_token_counter",
    "token_counter",
    "tool_schema_text",
]

TokenCounter = Callable[[Sequence[BaseMessage]], int]

# Per-message overhead of the chat format (role, separators), as OpenAI documents it.
_MESSAGE_OVERHEAD = 3


def approximate_token_count(messages: Sequence[BaseMessage]) -> int:
    """About four characters a token, plus a few per message. Needs no tokenizer; errs high."""
    return int(count_tokens_approximately(messages))


@cache
def _encoding(name: str) -> Any:
    try:
        import bpe_openai
    except ImportError:  # exact counting needs the tokens extra; approximate counting needs nothing
        raise MissingDependencyError.for_extra("bpe-openai", "tokens") from None
    return bpe_openai.get_encoding(name)


def _text_of(message: BaseMessage) -> str:
    parts: list[str] = [str(message.text)]
    for call in getattr(message, "tool_calls", None) or []:
        parts.append(call["name"])
        parts.append(str(call["args"]))
    return "\n".join(parts)


def exact_token_counter(encoding: str = "o200k_base") -> TokenCounter:
    """A counter using the named OpenAI encoding (``o200k_base``, ``cl100k_base``), offline."""
    enc = _encoding(encoding)

    def count(messages: Sequence[BaseMessage]) -> int:
        return sum(len(enc.encode(_text_of(m))) + _MESSAGE_OVERHEAD for m in messages)

    return count


def _request_parts(message: BaseMessage) -> list[str]:
    """The values an OpenAI-compatible request carries for ``message`` (besides the format's own tokens)."""
    import json

    role = {"human": "user", "ai": "assistant"}.get(message.type, message.type)
    parts = [role, str(message.text)]
    if message.name:
        parts.append(message.name)
    for call in getattr(message, "tool_calls", None) or []:
        parts += [call.get("id") or "", call["name"], json.dumps(call["args"], ensure_ascii=False)]
    tool_call_id = getattr(message, "tool_call_id", None)
    if tool_call_id:
        parts.append(tool_call_id)
    return parts


def chat_token_counter(encoding: str = "o200k_base") -> TokenCounter:
    """A counter of what an OpenAI-compatible chat request carries, in the named encoding, offline.

    OpenAI's documented rule: 3 tokens per message for the format, plus the tokens of each value (role,
    content, name); a tool call adds its id, name and JSON arguments, a tool result its call id. Unlike
    :func:`exact_token_counter` (the text only) it counts the roles, ids and JSON that tool rounds send.
    The provider's own rendering of tool calls and schemas is not published, so this is exact for the text
    and approximate for that rendering (``bench/counting.py`` measures both counters).
    """
    enc = _encoding(encoding)

    def count(messages: Sequence[BaseMessage]) -> int:
        return sum(
            sum(len(enc.encode(part)) for part in _request_parts(m)) + _MESSAGE_OVERHEAD for m in messages
        )

    return count


# OpenAI's chat and embedding models by name, longer names first: the encoding each one counts in. A dated
# or sized variant ("gpt-4o-mini-2024-07-18") counts as its family, a fine tune ("ft:gpt-4o-mini:org::id")
# as its base, "openai/gpt-4o" as "gpt-4o". Other names are counted approximately, and the tokenizer
# package (its import loads every encoding: about a second) is never imported for them.
_ENCODING_BY_PREFIX = (
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4-mini", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35-turbo", "cl100k_base"),  # Azure's spelling
    ("text-embedding-3-small", "cl100k_base"),
    ("text-embedding-3-large", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
)


def encoding_for_model(model: str) -> str | None:
    """The encoding ``model`` counts its tokens in (``o200k_base`` for ``gpt-4o-mini``), None when unknown."""
    name = model.lower().rsplit("/", 1)[-1].removeprefix("openai:").removeprefix("ft:")
    for prefix, encoding in _ENCODING_BY_PREFIX:
        # The family's name whole, or followed by a variant: "o1" and "o1-mini", not "o1x".
        if name == prefix or (name.startswith(prefix) and name[len(prefix)] in "-:."):
            return encoding
    return None


@cache
def counter_for_model(model: str) -> TokenCounter | None:
    """:func:`chat_token_counter` in ``model``'s encoding when it is known (OpenAI's models,
    :func:`encoding_for_model`, with the ``tokens`` extra installed), else None (count approximately)."""
    encoding = encoding_for_model(model)
    if encoding is None:
        return None
    try:
        import bpe_openai  # noqa: F401  (the extra: its absence means approximate counts)
    except ImportError:
        return None
    return chat_token_counter(encoding)


def token_counter(name: str) -> TokenCounter:
    """The counter named in the settings: ``approximate``, ``o200k`` or ``cl100k``."""
    if name == "approximate":
        return approximate_token_count
    if name in ("o200k", "cl100k"):
        return exact_token_counter(f"{name}_base")
    raise ConfigError(f"unknown token counter {name!r}; use approximate, o200k or cl100k")


def tool_schema_text(tools: Sequence[Any]) -> str:
    """The tool schemas as the provider receives them (JSON), to be counted toward the prompt."""
    schemas = []
    for tool in tools:
        try:
            schemas.append(convert_to_openai_tool(tool))
        except (TypeError, ValueError, NotImplementedError):
            schemas.append({"tool": str(tool)})
    return json.dumps(schemas, sort_keys=True, default=str) if schemas else ""
