"""Commands for the long-term store: ``remem forget`` and ``remem store stats``."""

from __future__ import annotations

import click

from remem.cli._options import database_url, db_option, json_option

__all__ = ["COMMANDS", "forget_command", "store_group"]


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
def forget_command(
    user_id: str | None, thread_id: str | None, namespace: str | None, database_url: str | None, yes: bool
) -> None:
    """Erase a user's, a thread's or a namespace's memory for good (checkpoints too), and report what went.

    Example: remem forget --user alice --db sqlite:///.remem/remem.db --yes
    """
    from remem.cli._render import show_table
    from remem.cli._sources import checkpoint_state, inspect_database, open_checkpointer, store_url
    from remem.erasure import erase
    from remem.errors import NotFoundError, RememUsageError

    if sum(x is not None for x in (user_id, thread_id, namespace)) != 1:
        raise RememUsageError("give exactly one of --user, --thread or --namespace")
    url = _url(database_url)
    db = inspect_database(url, for_writing=True)  # a missing file is an error, not a new empty database
    shown = db.shown
    store_url(db)  # before anything is erased
    had_checkpoints = False
    if thread_id is not None:
        with open_checkpointer(db) as saver:
            had_checkpoints = saver is not None and checkpoint_state(saver, thread_id) is not None
    scope = f"user {user_id}" if user_id else f"thread {thread_id}" if thread_id else f"namespace {namespace}"
    if not yes:
        click.confirm(f"Erase everything stored for {scope} in {shown}? This cannot be undone", abort=True)
    report = erase(url, user_id=user_id, thread_id=thread_id, namespace=namespace)
    went = report.checkpoint_threads if thread_id is None else had_checkpoints
    if not report.store.items and not went:  # a typo must not read as a success
        raise NotFoundError(f"nothing is stored for {scope} in {shown}; check the name and --db")
    show_table(f"forgot {scope} in {shown}", ["what", "deleted"], report.as_rows())


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
    from remem.cli._render import emit_json, show_table
    from remem.cli._sources import inspect_database, require_persistent, store_url
    from remem.errors import NotFoundError
    from remem.store import open_store
    from remem.threads import parse_database_url

    target = _database_url(database_url, url)
    require_persistent(target)
    db = inspect_database(target)
    if not db.has_store:
        raise NotFoundError(
            f"{db.shown} holds no memory store; check --db (`remem threads` lists its threads)"
        )
    with open_store(store_url(db)) as store:
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


def _database_url(given: str | None, positional: str | None) -> str:
    return database_url(given, positional)


COMMANDS: list[click.Command] = [forget_command, store_group]
