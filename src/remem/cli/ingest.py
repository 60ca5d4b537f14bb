"""``remem ingest load | list | undo``: write batches from outside a turn, each with an id, undone whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from remem.cli._options import db_option, json_option

if TYPE_CHECKING:
    from remem.memory import Memory

__all__ = ["COMMANDS", "ingest_group"]


@click.group("ingest")
def ingest_group() -> None:
    """Load messages and memories as one ingestion with an id; list ingestions; undo one (see RUNBOOK.md)."""


def _memory(database_url: str | None, *, write: bool, create: bool = False) -> Memory:
    from remem.cli._options import database_url as url_of
    from remem.cli._sources import inspect_database, require_persistent, writable
    from remem.config import load_settings
    from remem.errors import NotFoundError
    from remem.memory import Memory

    url = require_persistent(url_of(database_url))
    db = inspect_database(writable(url) if create else url, for_writing=write)
    if not db.has_store and not write:
        raise NotFoundError(f"{db.shown} has no memory store, so no ingestions; check --db")
    return Memory.from_url(writable(db.url) if write else db.url, settings=load_settings())


def memory_url(database_url: str | None) -> str:
    from remem.cli._options import database_url as url_of

    return url_of(database_url)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    from remem.errors import RememUsageError

    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RememUsageError(
                    f"{path}:{number} is not JSON ({exc.msg}); give one JSON object a line"
                ) from None
            if not isinstance(row, dict) or not isinstance(row.get("user_id", ""), str):
                raise RememUsageError(f"{path}:{number}: give an object with thread_id (a message) or memory")
            yield number, row


def _batches(path: Path) -> list[tuple[str | None, str | None, list[dict[str, Any]]]]:
    """The file's lines as batches: (thread, user, messages) for a run of one thread's messages, (None,
    user, memories) for memories; every line checked (a message as ``add_messages`` would)."""
    from remem.errors import RememUsageError
    from remem.memory._records import stored_message_from_input

    batches: list[tuple[str | None, str | None, list[dict[str, Any]]]] = []
    for number, row in _lines(path):
        if "memory" in row:
            user = row.get("user_id")
            if not isinstance(user, str) or not user or not isinstance(row["memory"], str):
                raise RememUsageError(f"{path}:{number}: a memory needs a text and the user_id it belongs to")
            row = {**row, "text": row.pop("memory")}
            thread = None
        else:
            thread, user = row.pop("thread_id", None), row.pop("user_id", None)
            if not isinstance(thread, str) or not thread:
                raise RememUsageError(f"{path}:{number}: a message needs a thread_id (or give a memory)")
            try:
                stored_message_from_input(row, number)
            except RememUsageError as exc:
                raise RememUsageError(f"{path}:{number}: {exc}") from None
        last = batches[-1] if batches else None
        if last is not None and (last[0], last[1]) == (thread, user) and len(last[2]) < 200:
            last[2].append(row)
        else:
            batches.append((thread, user, [row]))
    return batches


@ingest_group.command("load")
@db_option
@json_option
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def load_command(database_url: str | None, as_json: bool, path: Path) -> None:
    """Load a JSONL file of messages and memories as one ingestion (undo it with `remem ingest undo`).

    Each line is a message, {"thread_id": T, "user_id": U, "role": "user", "content": "...", "id": "m1",
    "timestamp": "2026-11-29T12:00:00Z"}, or a memory, {"user_id": U, "memory": "prefers email"}.

    A summary refresh of each thread it wrote is queued for `remem worker` (or `remem queue drain`).

    Example: remem ingest load crm-export.jsonl --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import emit_json, say
    from remem.ingestion import begin_ingestion
    from remem.jobs import open_queue

    batches = _batches(path)  # the whole file is checked before anything is written
    with (
        _memory(database_url, write=True, create=True) as memory,
        open_queue(memory_url(database_url)) as queue,
        begin_ingestion(memory, kind="load", source=path.name, queue=queue) as ing,
    ):
        for thread, user, rows in batches:
            if thread is None:
                ing.add_memories(str(user), rows)
            else:
                ing.add_messages(thread, rows, user_id=user)
    entry = ing.entry
    if as_json:
        emit_json(entry.as_row())
        return
    say(
        f"ingestion {entry.id}: {entry.added.get('messages', 0)} message(s) in {len(entry.threads)} thread(s), "
        f"{entry.added.get('memories', 0)} memory(ies); undo it with `remem ingest undo --id {entry.id}`"
    )


@ingest_group.command("list")
@db_option
@json_option
def list_command(database_url: str | None, as_json: bool) -> None:
    """List the ingestions recorded, oldest first: id, kind, source, state and what each added.

    Example: remem ingest list --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import emit_json, say, show_table
    from remem.ingestion import list_ingestions

    with _memory(database_url, write=False) as memory:
        rows = [e.as_row() for e in list_ingestions(memory)]
    if as_json:
        emit_json({"ingestions": rows})
        return
    if not rows:
        say("no ingestion recorded")
        return
    columns = list(rows[0])
    show_table("ingestions", columns, [[r[c] for c in columns] for r in rows])


@ingest_group.command("undo")
@db_option
@json_option
@click.option("--id", "ingestion_id", metavar="ID", help="The ingestion to undo (`remem ingest list`).")
@click.option(
    "--last", is_flag=True, help="Undo the newest ingestion not undone (or finish an undo left open)."
)
def undo_command(database_url: str | None, as_json: bool, ingestion_id: str | None, last: bool) -> None:
    """Remove what one ingestion added: its messages (vectors and keyword rows too), its memories and the
    memories extracted from its messages; summaries built on them are marked stale and rebuilt on next use.

    Journaled: an undo that was stopped goes on from where it stopped when run again. A summary refresh
    of each thread it kept is queued for `remem worker`.

    Example: remem ingest undo --last --db sqlite:///.remem/remem.db
    """
    from contextlib import ExitStack

    from remem.checkpoint import checkpointer_from_url
    from remem.cli._render import emit_json, show_table
    from remem.ingestion import list_ingestions, undo_ingestion
    from remem.jobs import open_queue

    if (ingestion_id is None) == (not last):
        raise click.UsageError("give --id ID or --last (one of them)")
    url = memory_url(database_url)
    with ExitStack() as stack:
        memory = stack.enter_context(_memory(database_url, write=True))
        queue = stack.enter_context(open_queue(url))
        # an import's checkpoints are deleted by its undo; other undos leave the checkpoint tables unopened
        imports = any(e.imported and e.state != "undone" for e in list_ingestions(memory))
        saver = stack.enter_context(checkpointer_from_url(url)) if imports else None
        report = undo_ingestion(memory, ingestion_id, last=last, queue=queue, checkpointer=saver)
    rows = report.as_rows()
    if as_json:
        emit_json(dict(rows))
        return
    show_table("ingestion undone", ["what", "count"], rows)


COMMANDS: list[click.Command] = [ingest_group]
