"""Tables and text shared by the commands."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from langchain_core.messages import AIMessage, BaseMessage
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from remem.inspection import HistoryRow, ThreadSnapshot

# Piped output gets a wide, fixed width so tables stay readable in logs.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def preview(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def role_of(message: BaseMessage) -> str:
    if isinstance(message, AIMessage) and message.tool_calls:
        return "ai→tools"
    return {"human": "user", "ai": "assistant"}.get(message.type, message.type)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    t = Table(title=title, title_justify="left")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        # Cells hold stored text: escape it, or "[/b]" in a message would be read as markup.
        t.add_row(*("" if cell is None else escape(str(cell)) for cell in row))
    return t


def show_snapshot(snapshot: ThreadSnapshot, last: int = 10) -> None:
    console.print(f"thread [bold]{escape(snapshot.thread_id)}[/bold]", end="  ")
    console.print(f"checkpoint {snapshot.checkpoint_id}  at {snapshot.created_at}")
    console.print(
        f"messages in state: {len(snapshot.messages)}   next: {', '.join(snapshot.next) or '(none)'}"
    )
    shown = snapshot.messages[-last:] if last else snapshot.messages
    console.print(
        table(
            f"messages (last {len(shown)} of {len(snapshot.messages)})",
            ["#", "role", "id", "content"],
            (
                (
                    len(snapshot.messages) - len(shown) + i + 1,
                    role_of(m),
                    preview(str(m.id), 12),
                    preview(m.text),
                )
                for i, m in enumerate(shown)
            ),
        )
    )
    console.print("[bold]summary[/bold]: " + escape(snapshot.summary or "(none yet)"))
    console.print(
        table(
            "usage (model calls)",
            ["turn", "node", "model", "input tokens", "output tokens", "latency ms"],
            (
                (u["turn"], u["node"], u["model"], u["input_tokens"], u["output_tokens"], u["latency_ms"])
                for u in snapshot.usage[-last:]
            ),
        )
    )
    console.print(
        f"total: {len(snapshot.usage)} calls, {snapshot.input_tokens} input tokens, "
        f"{snapshot.output_tokens} output tokens"
    )


def show_history(thread_id: str, rows: Sequence[HistoryRow]) -> None:
    console.print(
        table(
            f"history of {thread_id} (newest first)",
            ["step", "messages", "next", "source", "checkpoint", "created"],
            (
                (r.step, r.message_count, ", ".join(r.next), r.source, r.checkpoint_id, r.created_at)
                for r in rows
            ),
        )
    )
