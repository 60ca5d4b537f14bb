"""Commands for the memory client: card, summary, search. Each calls the public ``remem.Memory`` API."""

from __future__ import annotations

import click

from remem.cli._options import db_option
from remem.cli._render import console, preview, table
from remem.config import load_settings
from remem.memory import DEFAULT_CARD_TOKEN_BUDGET, Memory

__all__ = ["COMMANDS", "card_command", "search_command", "summary_command"]


def _memory(database_url: str | None) -> Memory:
    settings = load_settings()
    return Memory.from_url(database_url or settings.database_url, settings=settings)


@click.command("card")
@click.argument("thread_id")
@click.option(
    "--except-last", default=0, show_default=True, help="Leave the last N messages out of the card."
)
@click.option(
    "--recent",
    default=0,
    show_default=True,
    help="Put the last N messages inside the card (0 or --except-last).",
)
@click.option("--query", default=None, help="Search with this text instead of the latest user message.")
@click.option(
    "--budget", default=DEFAULT_CARD_TOKEN_BUDGET, show_default=True, help="Token budget of the card."
)
@db_option
def card_command(
    thread_id: str, except_last: int, recent: int, query: str | None, budget: int, database_url: str | None
) -> None:
    """Print a thread's context card (the XML an agent would be sent).

    Example: remem card support-42 --except-last 3
    """
    with _memory(database_url) as memory:
        card = memory.get_thread(thread_id).get_context_card(
            except_last_messages=except_last, max_recent_messages=recent, token_budget=budget, query=query
        )
    if not card.content:
        console.print(f"thread {thread_id} has nothing to put in a card yet (the card is empty)")
        return
    click.echo(card.content)
    console.print(
        f"{card.token_count} tokens, summary revision {card.summary_revision}, "
        f"{len(card.records)} relevant records, {len(card.recent)} recent messages"
    )


@click.command("summary")
@click.argument("thread_id")
@click.option("--except-last", default=0, show_default=True, help="Leave the last N messages out.")
@click.option("--budget", default=1000, show_default=True, help="Token budget of the summary.")
@db_option
def summary_command(thread_id: str, except_last: int, budget: int, database_url: str | None) -> None:
    """Print a thread's summary, brought up to date first (a new revision when messages are new).

    Example: remem summary support-42
    """
    with _memory(database_url) as memory:
        summary = memory.get_thread(thread_id).get_summary(except_last=except_last, token_budget=budget)
    console.print(
        f"thread [bold]{thread_id}[/bold]  revision {summary.revision}  covers {summary.covered_count} "
        f"messages ({summary.first_message_id or '-'} .. {summary.last_message_id or '-'})"
    )
    click.echo(summary.text or "(no summary yet: the thread has no messages)")


@click.command("search")
@click.argument("query")
@click.option("--user", "user_id", default=None, help="Search this user's long-term memories.")
@click.option("--thread", "thread_id", default=None, help="Search this thread's messages.")
@click.option("--type", "types", multiple=True, help="Keep only this record type (repeatable).")
@click.option("-k", "k", default=10, show_default=True, help="How many records to show.")
@db_option
def search_command(
    query: str,
    user_id: str | None,
    thread_id: str | None,
    types: tuple[str, ...],
    k: int,
    database_url: str | None,
) -> None:
    """Search a user's memories and a thread's messages (hybrid keyword + vector).

    Example: remem search "which step fails" --user maya --thread support-42
    """
    with _memory(database_url) as memory:
        records = memory.search(query, user_id=user_id, thread_id=thread_id, types=list(types) or None, k=k)
    console.print(
        table(
            f"{len(records)} records for {query!r}",
            ["score", "type", "id", "status", "sources", "content"],
            (
                (
                    f"{r.score:.3f}",
                    r.type,
                    r.id,
                    r.status,
                    ", ".join(r.source_message_ids),
                    preview(r.content),
                )
                for r in records
            ),
        )
    )


COMMANDS: list[click.Command] = [card_command, summary_command, search_command]
