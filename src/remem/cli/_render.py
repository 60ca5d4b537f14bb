"""Everything the commands print goes through here: literal text, secrets masked, tables, JSON.

Stored strings are data. They are never read as rich markup (``[red]`` stays ``[red]``), control
characters are shown as ``\\x1b``-style escapes so that they cannot move the cursor or recolour the
terminal, and every string passes the one secrets mask (:func:`remem._secrets.mask_secrets`) before it is
laid out, so that a password cannot be split across a wrapped line and escape it.

rich is imported on first use: ``remem --help`` does not pay for it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import click

from remem._secrets import mask_secrets

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "clean",
    "console",
    "emit_json",
    "error_line",
    "message_json",
    "message_row",
    "preview",
    "say",
    "show_table",
    "table",
]

# C0 controls but tab and newline, DEL and the C1 controls (ESC, CSI ... move the cursor or recolour).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f]")  # json.dumps escapes C0 itself, but not these
PREVIEW_WIDTH = 80


def _escape_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def _configured_keys() -> tuple[str | None, ...]:
    # Keys come from the environment only (remem.config refuses them in files); any shape is masked.
    return tuple(os.environ.get(name) for name in ("REMEM_LLM_API_KEY", "OPENAI_API_KEY"))


def clean(value: object) -> str:
    """``value`` as text that is safe to show: secrets masked, control characters escaped."""
    text = mask_secrets("" if value is None else str(value), *_configured_keys())
    return _CONTROL.sub(_escape_control, text)


@cache
def console() -> Console:
    from rich.console import Console

    # Literal by default (no markup, emoji codes or highlighting); piped output gets a fixed width so that
    # tables stay readable in logs.
    return Console(
        markup=False,
        emoji=False,
        highlight=False,
        width=None if sys.stdout.isatty() else 160,
        soft_wrap=False,
    )


def say(*parts: object, style: str | None = None) -> None:
    """Print one line of text, literally."""
    from rich.text import Text

    # soft_wrap: a long line is left to the terminal, so a command or a path can be copied whole.
    console().print(Text(" ".join(clean(p) for p in parts), style=style or ""), soft_wrap=True)


def error_line(message: object) -> str:
    """A message as one line for stderr: masked, controls escaped, newlines folded."""
    return " ".join(clean(message).split())


def preview(text: str, width: int = PREVIEW_WIDTH, *, full: bool = False) -> str:
    """``text`` on one line, cut to ``width`` characters with "…" (``full``: whole, line breaks kept)."""
    if full:
        return text
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    """A table whose cells are literal, masked text."""
    from rich.table import Table
    from rich.text import Text

    t = Table()
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*(Text(clean(cell)) for cell in row))
    return t


def show_table(title: object, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """``title`` on a line of its own (a title above a narrow table would wrap), then the table."""
    say(title)
    console().print(table(columns, rows))


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return mask_secrets(value, *_configured_keys())
    if isinstance(value, Mapping):
        return {str(k): _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    return value


def emit_json(data: Any) -> None:
    """Print ``data`` as one JSON document (strings masked; every control character escaped)."""
    text = json.dumps(_masked(data), ensure_ascii=False, indent=2, default=str)
    click.echo(_RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant"}.get(message.type, message.type)


def _tool_calls(message: BaseMessage) -> list[dict[str, Any]]:
    calls = getattr(message, "tool_calls", None) or []
    return [{"name": c.get("name"), "args": c.get("args"), "id": c.get("id")} for c in calls]


def message_text(message: BaseMessage) -> str:
    """What a message says, tool calls and tool results included (name and arguments shown)."""
    parts: list[str] = [str(message.text)] if message.text else []
    for call in _tool_calls(message):
        args = json.dumps(call["args"], ensure_ascii=False, sort_keys=True, default=str)
        parts.append(f"→ {call['name']}({args})")
    if message.type == "tool":
        who = getattr(message, "name", None) or "tool"
        parts.insert(0, f"← {who} [{getattr(message, 'tool_call_id', '')}]")
    return " ".join(parts)


def message_row(number: int, message: BaseMessage, *, full: bool) -> tuple[object, ...]:
    role = "assistant→tools" if _tool_calls(message) else _role(message)
    ident = str(message.id)
    return (number, role, ident if full else preview(ident, 12), preview(message_text(message), full=full))


def message_json(message: BaseMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"id": message.id, "role": _role(message), "content": str(message.text)}
    if calls := _tool_calls(message):
        data["tool_calls"] = calls
    if message.type == "tool":
        data["tool_call_id"] = getattr(message, "tool_call_id", None)
    if message.name:
        data["name"] = message.name
    return data
