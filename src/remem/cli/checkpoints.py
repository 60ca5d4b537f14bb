"""``remem checkpoints``: what a checkpoint database holds (stats) and retention (prune)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from remem.cli._options import api_key_option, database_url, db_option, json_option

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` as a timedelta."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text or "")
    if not match:
        raise click.BadParameter(f"{text!r} is not an age; write it like 30d, 12h, 90m, 45s or 2w")
    try:
        age = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        datetime.now(UTC) - age  # an age past year 1 cannot be a cutoff
    except OverflowError:
        raise click.BadParameter(
            f"{text!r} reaches back before the calendar starts; give a shorter age"
        ) from None
    return age


def _remem_saver(saver: Any, shown: str) -> Any:
    from remem.errors import NotFoundError

    if saver is None or not callable(getattr(saver, "stats", None)):
        raise NotFoundError(
            f"{shown} holds no remem checkpoints; check --db (a sqlite:/// or postgresql:// URL)"
        )
    return saver


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


@click.group("checkpoints")
def checkpoints_group() -> None:
    """Inspect and prune the checkpoints remem's savers keep."""


@checkpoints_group.command("stats")
@click.argument("url", required=False, metavar="[URL]")
@click.option("--limit", default=20, show_default=True, help="Most threads to list (newest first; 0: all).")
@db_option
@api_key_option
@json_option
def stats_command(url: str | None, limit: int, database_url: str | None, as_json: bool) -> None:
    """Threads, checkpoints and bytes per thread in a checkpoint database.

    URL is the same as --db (kept for older scripts).

    Example: remem checkpoints stats --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import emit_json, say, show_table
    from remem.cli._sources import REMOTE_KIND, inspect_database, open_checkpointer, require_persistent

    db = inspect_database(require_persistent(_database_url(database_url, url)))
    if db.kind == REMOTE_KIND:
        stats = _remote_stats(db)
    else:
        with open_checkpointer(db) as saver:
            stats = _remem_saver(saver, db.shown).stats()
    shown = stats.threads[:limit] if limit else stats.threads
    if as_json:
        emit_json(
            {
                "database": db.shown,
                "threads": [
                    {
                        "thread": t.thread_id,
                        "checkpoints": t.checkpoints,
                        "writes": t.writes,
                        "stored_values": t.items,
                        "bytes": t.bytes,
                        "updated_at": t.updated_at.isoformat(),
                    }
                    for t in shown
                ],
                "thread_count": len(stats.threads),
                "checkpoints": stats.checkpoints,
                "storage_bytes": stats.storage_bytes,
            }
        )
        return
    rows = (
        (
            t.thread_id,
            t.checkpoints,
            t.writes,
            t.items,
            _size(t.bytes),
            t.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
        for t in shown
    )
    columns = ["thread", "checkpoints", "writes", "stored values", "bytes", "last written (UTC)"]
    show_table(f"checkpoints in {db.shown} (newest first)", columns, rows)
    say(
        f"{len(stats.threads)} threads, {stats.checkpoints} checkpoints, "
        f"{_size(stats.storage_bytes)} on disk"
        + (f" ({len(shown)} threads shown)" if len(shown) < len(stats.threads) else "")
    )


@checkpoints_group.command("prune")
@click.argument("url", required=False, metavar="[URL]")
@click.option("--thread", "thread_ids", multiple=True, metavar="ID", help="A thread to prune (repeatable).")
@click.option("--all", "all_threads", is_flag=True, help="Prune every thread in the database.")
@click.option(
    "--older-than", "older_than", metavar="AGE", help="Only what is older than AGE (30d, 12h, 2w...)."
)
@click.option(
    "--strategy",
    type=click.Choice(["keep-latest", "delete"]),
    default="keep-latest",
    show_default=True,
    help="keep-latest: drop history, keep each thread's latest state; delete: delete whole threads.",
)
@click.option(
    "--yes", is_flag=True, help="Do not ask first (asked for delete, and for --all without --older-than)."
)
@db_option
@api_key_option
def prune_command(
    url: str | None,
    thread_ids: tuple[str, ...],
    all_threads: bool,
    older_than: str | None,
    strategy: str,
    yes: bool,
    database_url: str | None,
) -> None:
    """Drop old checkpoints (keep-latest) or whole threads (delete), with the values only they used.

    With --older-than, keep-latest drops checkpoints created before that age (each thread keeps its
    latest), and delete removes threads with no activity for that long. URL is the same as --db.

    Example: remem checkpoints prune --db sqlite:///.remem/remem.db --all --older-than 30d
    """
    from remem.cli._render import say
    from remem.cli._sources import REMOTE_KIND, inspect_database, open_checkpointer, require_persistent
    from remem.errors import NotFoundError

    if not thread_ids and not all_threads:
        raise click.UsageError("say which threads to prune: --thread ID (repeatable) or --all")
    age = parse_age(older_than) if older_than is not None else None
    db = inspect_database(require_persistent(_database_url(database_url, url)), for_writing=True)
    if db.kind == REMOTE_KIND:
        _remote_prune(db, thread_ids, strategy, age, yes=yes, asked_all=all_threads and older_than is None)
        return
    with open_checkpointer(db, write=True) as opened:
        saver = _remem_saver(opened, db.shown)
        known = saver.list_threads()
        missing = [t for t in thread_ids if t not in set(known)]
        if missing:
            raise NotFoundError(
                f"no thread {', '.join(repr(t) for t in missing)} in {db.shown}; "
                "`remem checkpoints stats` lists the threads"
            )
        targets = list(thread_ids) or known
        if not yes and (strategy == "delete" or (all_threads and older_than is None)):
            what = f"{len(targets)} thread(s)" + (f" idle for {older_than}" if older_than else "")
            doing = "Delete" if strategy == "delete" else "Drop all history but the latest state of"
            click.confirm(f"{doing} {what} in {db.shown}, for good?", abort=True)
        count = saver.prune_threads(targets, strategy=strategy.replace("-", "_"), older_than=age)
    if strategy == "delete":
        say(f"deleted {count} thread(s) from {db.shown}")
    else:
        say(
            f"deleted {count} checkpoint(s) from {len(targets)} thread(s) in {db.shown}; each keeps its latest state"
        )


def _remote_stats(db: Any) -> Any:
    """A server's checkpoint stats (the key's tenant's threads), as the saver's ``stats()`` gives them."""
    from remem.checkpoint import CheckpointStats, ThreadStats
    from remem.cli._sources import open_remote

    with open_remote(db) as remote:
        found = remote.checkpoint_stats()
    threads = [
        ThreadStats(**{**t, "updated_at": datetime.fromisoformat(t["updated_at"])}) for t in found["threads"]
    ]
    return CheckpointStats(threads, int(found["storage_bytes"]))


def _remote_prune(
    db: Any, thread_ids: tuple[str, ...], strategy: str, age: timedelta | None, *, yes: bool, asked_all: bool
) -> None:
    """``prune`` on a server: the key's tenant's threads (all of them without --thread)."""
    from remem.cli._render import say
    from remem.cli._sources import open_remote

    with open_remote(db) as remote:
        if not yes and (strategy == "delete" or asked_all):
            count = len(thread_ids) or len(remote.checkpoint_stats()["threads"])
            doing = "Delete" if strategy == "delete" else "Drop all history but the latest state of"
            click.confirm(f"{doing} {count} thread(s) in {db.shown}, for good?", abort=True)
        done = remote.prune_checkpoints(
            thread_ids,
            strategy=strategy.replace("-", "_"),
            older_than=None if age is None else age.total_seconds(),
        )
    targets = len(done["threads"])
    if strategy == "delete":
        say(f"deleted {done['deleted']} thread(s) from {db.shown}")
    else:
        say(
            f"deleted {done['deleted']} checkpoint(s) from {targets} thread(s) in {db.shown}; each keeps its latest state"
        )


def _database_url(given: str | None, positional: str | None) -> str:
    return database_url(given, positional)


@click.command("import")
@click.argument("source", required=False)
@click.option(
    "--into",
    "--db",
    "target",
    metavar="URL",
    help="The remem database to import into (default: SOURCE itself; SOURCE's default: this one).",
)
def import_command(source: str, target: str | None) -> None:
    """Copy every thread of LangGraph's stock SqliteSaver / PostgresSaver into remem's checkpointer.

    Checkpoints, parents, metadata and pending writes; the stock tables are left as they are. Each
    thread's conversation also goes into its memory thread (searchable). The import is one ingestion:
    `remem ingest undo --id ID` takes it back. --db is the remem database to import into (default:
    SOURCE itself). Run it again after an interruption: it continues where it stopped.

    Example: remem import sqlite:///app.db --db sqlite:///.remem/remem.db
    """
    from remem._url import display_url, parse_database_url
    from remem.cli._render import say
    from remem.cli._sources import inspect_database, writable
    from remem.config import load_settings
    from remem.errors import StorageError
    from remem.ingestion import import_checkpoints
    from remem.jobs import open_queue
    from remem.memory import Memory

    source = database_url(None, source or target)
    db = inspect_database(source, for_writing=True)
    into = parse_database_url(target or source)
    if into.kind == "sqlite" and into.sqlite_path.is_file() and not os.access(into.sqlite_path, os.W_OK):
        raise StorageError(f"cannot write {display_url(target or source)}; check its permissions")
    if not db.holds_stock_tables and db.has_checkpoints:
        say(f"nothing to import: {db.shown} holds remem's checkpoints and no LangGraph stock ones")
        return
    into_url = target or source
    with (
        Memory.from_url(writable(into_url), settings=load_settings()) as memory,
        open_queue(into_url) as queue,
    ):
        report, entry = import_checkpoints(memory, source, into_url, queue=queue)
    say(
        f"imported {report.checkpoints} checkpoint(s) and {report.writes} pending write(s) of {report.threads} "
        f"thread(s) into {display_url(into_url)}"
        + (f"; {report.skipped} already there" if report.skipped else "")
        + f"; ingestion {entry.id} ({entry.added.get('messages', 0)} message(s) into the memory threads): "
        f"undo it with `remem ingest undo --id {entry.id}`"
    )


COMMANDS: list[click.Command] = [checkpoints_group, import_command]
