"""Commands for the long-term store: ``remem forget`` and ``remem store stats``."""

from __future__ import annotations

from pathlib import Path

import click

from remem._url import parse_database_url
from remem.cli._options import db_option
from remem.cli._render import console, table
from remem.config import load_settings
from remem.erasure import erase
from remem.errors import ConfigError, RememUsageError
from remem.store import open_store

__all__ = ["COMMANDS", "forget_command", "store_group"]


def _url(database_url: str | None) -> str:
    url = database_url or load_settings().database_url
    if parse_database_url(url).kind == "memory":
        raise ConfigError(
            "memory:// keeps nothing between runs; pass --db sqlite:///PATH or postgresql://..."
        )
    return url


@click.command("forget")
@click.option("--user", "user_id", metavar="USER", help="Erase this user's memories, turns and threads.")
@click.option(
    "--thread", "thread_id", metavar="THREAD", help="Erase this thread and what was extracted from it."
)
@click.option(
    "--namespace", metavar="A.B", help="Erase every item under this namespace (labels joined by '.')."
)
@db_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def forget_command(
    user_id: str | None, thread_id: str | None, namespace: str | None, database_url: str | None, yes: bool
) -> None:
    """Erase a user's, a thread's or a namespace's memory for good (checkpoints too), and report what went.

    Example: remem forget --user alice --db sqlite:///.remem/remem.db --yes
    """
    if sum(x is not None for x in (user_id, thread_id, namespace)) != 1:
        raise RememUsageError("give exactly one of --user, --thread or --namespace")
    url = _url(database_url)
    scope = f"user {user_id}" if user_id else f"thread {thread_id}" if thread_id else f"namespace {namespace}"
    if not yes:
        click.confirm(f"Erase everything stored for {scope} in {url}? This cannot be undone", abort=True)
    report = erase(url, user_id=user_id, thread_id=thread_id, namespace=namespace)
    console.print(table(f"forgot {scope}", ["what", "deleted"], report.as_rows()))


@click.group("store")
def store_group() -> None:
    """Inspect the long-term store (memories and indexed turns)."""


@store_group.command("stats")
@click.argument("url", required=False)
def stats_command(url: str | None) -> None:
    """Show how many items, namespaces and vectors a store holds, by root label.

    Example: remem store stats sqlite:///.remem/remem.db
    """
    url = _url(url)
    with open_store(url) as store:
        stats = store.stats()
    rows = [(name, stats[name]) for name in ("items", "namespaces", "vectors", "expiring items")]
    if url.startswith("sqlite:///") or not url.startswith(("postgres://", "postgresql://")):
        path = Path(url.removeprefix("sqlite:///"))
        if path.exists():
            rows.append(("file size (bytes)", path.stat().st_size))
    console.print(table(f"store {url}", ["", "count"], rows))
    if stats["by_root"]:
        console.print(table("items by root label", ["root", "items"], stats["by_root"].items()))


COMMANDS: list[click.Command] = [forget_command, store_group]
