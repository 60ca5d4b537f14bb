"""Token counting: an approximate counter that needs nothing, and exact ones from offline BPE files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately

from remem.errors import ConfigError, MissingDependencyError

__all__ = ["TokenCounter", "approximate_token_count", "exact_token_counter", "token_counter"]

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
    except ImportError:  # pragma: no cover - the dev environment has the extra
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


def token_counter(name: str) -> TokenCounter:
    """The counter named in the settings: ``approximate``, ``o200k`` or ``cl100k``."""
    if name == "approximate":
        return approximate_token_count
    if name in ("o200k", "cl100k"):
        return exact_token_counter(f"{name}_base")
    raise ConfigError(f"unknown token counter {name!r}; use approximate, o200k or cl100k")
