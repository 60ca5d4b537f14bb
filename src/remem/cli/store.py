"""Commands for the long-term store: ``remem forget`` and ``remem store stats``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from remem._url import display_url, parse_database_url
from remem.cli._options import db_option
from remem.cli._render import console, table
from remem.config import load_settings
from remem.erasure import ErasureReport, erase, finish_erasures, unfinished_erasures
from remem.errors import ConfigError, ErasureIncompleteError, NotFoundError, RememUsageError
from remem.store import open_store

__all__ = ["COMMANDS", "forget_command", "store_group"]

T = TypeVar("T")


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
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How long compaction waits for other connections that still read the old rows.",
)
def forget_command(
    user_id: str | None,
    thread_id: str | None,
    namespace: str | None,
    database_url: str | None,
    yes: bool,
    wait: float,
) -> None:
    """Erase a user's, a thread's or a namespace's memory for good (checkpoints too), and report what went.

    Every erasure is recorded before anything is deleted. With no --user, --thread or --namespace, this
    finishes the erasures a crash or a failure left unfinished; the same command again does that too.
    It exits 1 while an erasure is unfinished (compaction included) or when nothing was found.

    Example: remem forget --user alice --db sqlite:///.remem/remem.db --yes
    """
    given = sum(x is not None for x in (user_id, thread_id, namespace))
    if given > 1:
        raise RememUsageError("give exactly one of --user, --thread or --namespace (or none, to finish)")
    url = _url(database_url)
    if not given:
        reports = _run_reported(lambda: finish_erasures(url, wait=wait))
        if not reports:
            console.print(f"no unfinished erasure in {display_url(url)}")
        for report in reports:
            console.print(
                table(f"finished erasure {report.erasure_id}", ["what", "deleted"], report.as_rows())
            )
        return
    scope = f"user {user_id}" if user_id else f"thread {thread_id}" if thread_id else f"namespace {namespace}"
    if not yes:
        click.confirm(
            f"Erase everything stored for {scope} in {display_url(url)}? This cannot be undone", abort=True
        )
    report = _run_reported(
        lambda: erase(url, user_id=user_id, thread_id=thread_id, namespace=namespace, wait=wait)
    )
    console.print(table(f"forgot {scope}", ["what", "deleted"], report.as_rows()))
    others = unfinished_erasures(url)
    if others:
        console.print(f"{others} other erasure(s) are unfinished; run `remem forget --db ...` to finish them")
    if not report.removed:
        raise NotFoundError(f"nothing was stored for {scope} in {display_url(url)}; check the id")


def _run_reported(call: Callable[[], T]) -> T:
    """Run an erasure; when it stops part way, show what it did before the error says why."""
    try:
        return call()
    except ErasureIncompleteError as exc:
        if isinstance(exc.report, ErasureReport):
            console.print(table("erased so far (unfinished)", ["what", "deleted"], exc.report.as_rows()))
        raise


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
