"""Commands for the long-term store: ``remem forget``, ``remem store stats`` and ``remem store reembed``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from remem.cli._options import database_url, db_option, json_option
from remem.cli._sources import Database

__all__ = ["COMMANDS", "forget_command", "store_group"]

T = TypeVar("T")


def _url(database_url: str | None) -> str:
    from remem.cli._sources import require_persistent

    url = database_url or _configured_url()
    require_persistent(url)
    return url


def _configured_url() -> str:
    from remem.config import load_settings

    return load_settings().database_url


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
    "--stock",
    is_flag=True,
    help="Erase the thread's (or the user's) LangGraph stock checkpoints, in a database remem does not manage.",
)
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
    stock: bool,
    wait: float,
) -> None:
    """Erase a user's, a thread's or a namespace's memory for good (checkpoints too), and report what went.

    Every erasure is recorded before anything is deleted. With no --user, --thread or --namespace, this
    finishes the erasures a crash or a failure left unfinished; the same command again does that too.
    It exits 1 while an erasure is unfinished (compaction included) or when nothing was found.
    On a database that holds only LangGraph's stock checkpoints it says so and creates nothing; --stock
    erases the stock checkpoints of the thread (or of the user's threads) there.

    Example: remem forget --user alice --db sqlite:///.remem/remem.db --yes
    """
    from remem.cli._render import say, show_table
    from remem.cli._sources import inspect_database
    from remem.erasure import erase, finish_erasures, unfinished_erasures
    from remem.errors import NotFoundError, RememUsageError

    given = sum(x is not None for x in (user_id, thread_id, namespace))
    if given > 1:
        raise RememUsageError("give exactly one of --user, --thread or --namespace (or none, to finish)")
    url = _url(database_url)
    db = inspect_database(url, for_writing=True)  # a missing file is an error, not a new empty database
    scope = f"user {user_id}" if user_id else f"thread {thread_id}" if thread_id else f"namespace {namespace}"
    if stock or not (db.has_store or db.has_checkpoints or db.has_ledger):
        _forget_without_remem(db, stock, scope, user_id, thread_id, yes=yes, given=bool(given))
        return
    if not given:
        reports = _run_reported(lambda: finish_erasures(url, wait=wait))
        if not reports:
            say(f"no unfinished erasure in {db.shown}")
        for report in reports:
            show_table(f"finished erasure {report.erasure_id}", ["what", "deleted"], report.as_rows())
        return
    if not yes:
        click.confirm(f"Erase everything stored for {scope} in {db.shown}? This cannot be undone", abort=True)
    report = _run_reported(
        lambda: erase(url, user_id=user_id, thread_id=thread_id, namespace=namespace, wait=wait)
    )
    if not report.removed:  # a typo must not read as a success
        raise NotFoundError(f"nothing was stored for {scope} in {db.shown}; check the id")
    show_table(f"forgot {scope} in {db.shown}", ["what", "deleted"], report.as_rows())
    others = unfinished_erasures(url)
    if others:
        say(f"{others} other erasure(s) are unfinished; run `remem forget --db ...` to finish them")


def _forget_without_remem(
    db: Database,
    stock: bool,
    scope: str,
    user_id: str | None,
    thread_id: str | None,
    *,
    yes: bool,
    given: bool,
) -> None:
    """``forget`` where remem keeps nothing (creating nothing there), or on the stock checkpoints (--stock)."""
    from remem.checkpoint._stock import erase_stock_threads, stock_threads
    from remem.cli._render import say, show_table
    from remem.errors import NotFoundError, RememUsageError

    if stock and (user_id is None) == (thread_id is None):
        raise RememUsageError("--stock erases stock checkpoints: give it --user or --thread")
    if not given:
        say(f"no unfinished erasure in {db.shown} (it holds no remem tables)")
        return
    held = stock_threads(db.url, user_id=user_id, thread_id=thread_id)
    if stock:
        if not held:
            raise NotFoundError(f"there are no stock checkpoints of {scope} in {db.shown}; check the id")
        if not yes:
            click.confirm(
                f"Erase the stock checkpoints of {scope} in {db.shown}? This cannot be undone", abort=True
            )
        report = erase_stock_threads(db.url, user_id=user_id, thread_id=thread_id)
        show_table(f"forgot {scope} in {db.shown}", ["what", "deleted"], report.as_rows())
        return
    if held:
        raise NotFoundError(
            f"{db.shown} holds LangGraph's stock checkpoints, not remem's: {scope} has "
            f"{sum(held.values())} checkpoint(s) there (threads {', '.join(sorted(held))}). Copy them into "
            f"remem's tables with `remem import` (see remem import --help), or erase them where they are "
            "with the same command and --stock; nothing was changed"
        )
    raise NotFoundError(
        f"nothing was stored for {scope} in {db.shown} (it holds no remem tables); check --db"
    )


def _run_reported(call: Callable[[], T]) -> T:
    """Run an erasure; when it stops part way, show what it did before the error says why."""
    from remem.cli._render import show_table
    from remem.erasure import ErasureReport
    from remem.errors import ErasureIncompleteError

    try:
        return call()
    except ErasureIncompleteError as exc:
        if isinstance(exc.report, ErasureReport):
            show_table("erased so far (unfinished)", ["what", "deleted"], exc.report.as_rows())
        raise


@click.group("store")
def store_group() -> None:
    """Inspect the long-term store (memories and indexed turns)."""


@store_group.command("stats")
@click.argument("url", required=False, metavar="[URL]")
@db_option
@json_option
def stats_command(url: str | None, database_url: str | None, as_json: bool) -> None:
    """Show how many items, namespaces and vectors a store holds, by root label.

    URL is the same as --db (kept for older scripts).

    Example: remem store stats --db sqlite:///.remem/remem.db
    """
    from remem._url import parse_database_url
    from remem.cli._render import emit_json, show_table
    from remem.cli._sources import inspect_database, require_persistent
    from remem.errors import NotFoundError
    from remem.store import open_store

    target = _database_url(database_url, url)
    require_persistent(target)
    db = inspect_database(target)
    if not db.has_store:
        raise NotFoundError(
            f"{db.shown} holds no memory store; check --db (`remem threads` lists its threads)"
        )
    with open_store(db.url, read_only=True) as store:
        stats = store.stats()
    counts = {name: stats[name] for name in ("items", "namespaces", "vectors", "expiring items")}
    parsed = parse_database_url(target)
    if parsed.kind == "sqlite":
        counts["file size (bytes)"] = parsed.sqlite_path.stat().st_size
    if as_json:
        emit_json({"database": db.shown, **counts, "by_root": dict(stats["by_root"])})
        return
    show_table(f"store in {db.shown}", ["", "count"], counts.items())
    if stats["by_root"]:
        show_table("items by root label", ["root", "items"], stats["by_root"].items())


@store_group.command("reembed")
@db_option
def reembed_command(database_url: str | None) -> None:
    """Embed every stored vector again with the configured embedder and record it as the store's: after
    switching `embedder` (a store refuses to be opened with another model than the one that made its
    vectors). Searches rank the items not yet done poorly until it ends: run it while the store is idle.

    Example: REMEM_EMBEDDER=e5 remem store reembed --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import say
    from remem.cli._sources import inspect_database
    from remem.config import load_settings
    from remem.errors import NotFoundError
    from remem.memory._backends import index_config
    from remem.store import open_store

    db = inspect_database(_url(database_url), for_writing=True)  # never a private copy: it writes
    if not db.has_store:
        raise NotFoundError(f"{db.shown} holds no memory store; check --db (nothing to re-embed)")
    settings = load_settings()
    with open_store(db.url) as store:  # no index: its record may name the old model
        done = store.reembed(index_config(settings), progress=lambda n: say(f"  {n} items so far"))
    say(f"re-embedded: {done} item(s) with the {settings.embedder} embedder, now the store's")


def _database_url(given: str | None, positional: str | None) -> str:
    return database_url(given, positional)


COMMANDS: list[click.Command] = [forget_command, store_group]
