"""Commands for threads: config, chat, threads, state, history, demo."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from remem._url import display_url
from remem.agent import build_agent, run_turn, thread_config
from remem.checkpoint import checkpointer_from_url, list_threads
from remem.cli._options import db_option
from remem.cli._render import console, preview, show_history, show_snapshot, table
from remem.config import STRATEGY_NAMES, load_settings
from remem.demo import DemoTurn, run_demo
from remem.errors import RememError
from remem.inspection import reader_graph, thread_history, thread_snapshot
from remem.models import require_chat_model


@click.command("config")
def config_command() -> None:
    """Print the effective settings, secrets masked.

    Example: REMEM_STRATEGY=trim remem config
    """
    settings = load_settings()
    console.print(table("remem settings", ["setting", "value", "what it is"], settings.describe()))


@click.command("threads")
@db_option
def threads_command(database_url: str | None) -> None:
    """List the threads stored in a database, newest first.

    Example: remem threads --db sqlite:///.remem/remem.db
    """
    url = database_url or load_settings().database_url
    with checkpointer_from_url(url, create=False) as saver:
        ids = list_threads(saver)
    console.print(table(f"threads in {display_url(url)}", ["thread"], ([i] for i in ids)))


@click.command("state")
@click.argument("thread_id")
@click.option("--checkpoint", "checkpoint_id", help="Show the state at this checkpoint (time travel).")
@click.option(
    "--last", default=10, show_default=True, help="How many of the latest messages to show (0: all)."
)
@db_option
def state_command(thread_id: str, checkpoint_id: str | None, last: int, database_url: str | None) -> None:
    """Show a thread's messages, summary, next nodes and usage.

    Example: remem state demo-20261129-101500 --last 5
    """
    url = database_url or load_settings().database_url
    with checkpointer_from_url(url, create=False) as saver:
        show_snapshot(thread_snapshot(reader_graph(saver), thread_id, checkpoint_id), last)


@click.command("history")
@click.argument("thread_id")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Most checkpoints to list."
)
@db_option
def history_command(thread_id: str, limit: int, database_url: str | None) -> None:
    """List a thread's checkpoints: step, message count, next node.

    Example: remem history demo-20261129-101500 --limit 20
    """
    url = database_url or load_settings().database_url
    with checkpointer_from_url(url, create=False) as saver:
        show_history(thread_id, thread_history(reader_graph(saver), thread_id, limit))


@click.command("chat")
@click.option("--thread", "thread_id", default="default", show_default=True, help="Thread to talk in.")
@click.option(
    "--strategy", type=click.Choice(STRATEGY_NAMES), help="Memory strategy (default: REMEM_STRATEGY)."
)
@db_option
def chat_command(thread_id: str, strategy: str | None, database_url: str | None) -> None:
    """Talk to the configured model with memory. /state, /history and /exit inside.

    Example: REMEM_LLM_MODEL=llama3.2 REMEM_LLM_BASE_URL=http://localhost:11434/v1 remem chat --thread work
    """
    settings = load_settings()
    model = require_chat_model(settings)
    url = database_url or settings.database_url
    with checkpointer_from_url(url) as saver:
        agent = build_agent(model, strategy=strategy, checkpointer=saver, settings=settings)
        console.print(f"thread {thread_id} on {display_url(url)} ({agent.name}). /state, /history, /exit")
        while True:
            try:
                line = click.prompt("you", prompt_suffix="> ", default="", show_default=False)
            except (EOFError, click.Abort):
                break
            text = line.strip()
            if text in ("/exit", "/quit"):
                break
            if not text:
                continue
            try:  # the thread is intact after any of these errors: say what happened and go on
                if text == "/state":
                    show_snapshot(thread_snapshot(agent, thread_id))
                elif text == "/history":
                    show_history(thread_id, thread_history(agent, thread_id))
                else:
                    reply = run_turn(agent, thread_id, text, max_message_chars=settings.max_message_chars)
                    console.print("[bold]assistant[/bold]> " + escape(reply.text))
            except RememError as exc:
                console.print("[red]Error:[/red] " + escape(str(exc)))
        values = agent.get_state(thread_config(thread_id)).values
        console.print(f"bye: {len(values.get('messages', []))} messages in state for thread {thread_id}")


@click.command("demo")
@db_option
@click.option(
    "--strategy", type=click.Choice(STRATEGY_NAMES), help="Memory strategy (default: REMEM_STRATEGY)."
)
def demo_command(database_url: str | None, strategy: str | None) -> None:
    """Replay a 65-turn conversation through the agent, offline, and show what memory did each turn.

    Example: remem demo --strategy trim
    """
    overrides: dict[str, Any] = {
        k: v for k, v in {"database_url": database_url, "strategy": strategy}.items() if v
    }
    settings = load_settings(**overrides)
    console.print(
        f"remem demo: strategy {settings.strategy}, database {settings.database_url}, no LLM needed"
    )
    header = f"{'turn':>4}  {'in state':>8}  {'tokens sent':>11}  {'full history':>12}  {'summary':<9}  user"
    console.print(header)

    def show(t: DemoTurn) -> None:
        note = "refreshed" if t.summary_refreshed else ""
        recall = "" if t.recall is None else ("  ✓ recalled" if t.recalled else "  ✗ forgotten")
        console.print(
            f"{t.turn:>4}  {t.messages_in_state:>8}  {t.tokens_seen:>11}  {t.tokens_full_history:>12}  "
            f"{note:<9}  {preview(t.user, 48)}{recall}",
            markup=False,
        )

    report = run_demo(settings, on_turn=show)
    got, asked = report.recalled
    saved = 1 - report.tokens_seen / max(report.tokens_full_history, 1)
    console.print()
    console.print(
        table(
            "final state",
            ["", ""],
            [
                ("thread", report.thread_id),
                ("messages in state", report.messages_in_state),
                ("tokens the model saw", report.tokens_seen),
                ("tokens with full history", report.tokens_full_history),
                ("saved", f"{saved:.0%}"),
                ("facts recalled", f"{got}/{asked}"),
            ],
        )
    )
    console.print("[bold]rolling summary[/bold]:")
    console.print(report.summary or "(none)", markup=False)
    console.print(f"\nInspect it: remem state {report.thread_id}   remem history {report.thread_id}")


COMMANDS = [config_command, chat_command, threads_command, state_command, history_command, demo_command]
