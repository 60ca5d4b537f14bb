"""Commands for the memory client: card, summary, search. Each calls the public ``remem.Memory`` API.

They read any thread: the memory client's, or an agent's that only remem's checkpointer holds (see
``remem.cli._sources``), and say which one they read. ``card`` and ``summary`` are reads: they show the
summary as stored and say when it is stale; ``--refresh`` extends it (a new revision, an LLM call when a
model is configured).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from remem.cli._options import api_key_option, database_url, db_option, full_option, json_option

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langgraph.store.base import BaseStore, Op, Result

    from remem.memory import MemoryRecord, Summary, Thread
    from remem.summarize import SummaryResult

__all__ = ["COMMANDS", "card_command", "search_command", "summary_command"]


def _latest_summary(thread: Thread, boundary: int) -> Summary | None:
    """The newest stored summary revision that covers nothing at or past ``boundary``."""
    fitting = [s for s in thread.summaries() if s.covered_count <= boundary]
    return fitting[-1] if fitting else None


def _stale_note(command: str, thread_id: str, covered: int, boundary: int) -> str:
    if covered >= boundary:
        return "up to date"
    return (
        f"stale: {boundary - covered} message(s) since it was written; "
        f"`remem {command} {thread_id} --refresh` extends it"
    )


class _StoredSummaryOnly:
    """A summariser that adds nothing: the card shows the summary as it is stored (no LLM call)."""

    def summarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        from remem.summarize import SummaryResult

        return SummaryResult(text=previous, model="stored")

    async def asummarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        return self.summarize(previous, messages)


def _read_only(store: BaseStore) -> BaseStore:
    """``store`` with its writes dropped: what a card would store is left out, the rest reads through."""
    from langgraph.store.base import BaseStore, PutOp

    class ReadOnly(BaseStore):
        def batch(self, ops: Iterable[Op]) -> list[Result]:
            ops = list(ops)
            reads = iter(store.batch([op for op in ops if not isinstance(op, PutOp)]))
            return [None if isinstance(op, PutOp) else next(reads) for op in ops]

        async def abatch(self, ops: Iterable[Op]) -> list[Result]:
            ops = list(ops)
            reads = iter(await store.abatch([op for op in ops if not isinstance(op, PutOp)]))
            return [None if isinstance(op, PutOp) else next(reads) for op in ops]

    return ReadOnly()


# The library's parameter names as the card command spells them, for its errors.
_CARD_OPTIONS = {
    "except_last_messages": "--except-last",
    "max_recent_messages": "--recent",
    "token_budget": "--budget",
}


@contextmanager
def _option_names(names: dict[str, str]) -> Iterator[None]:
    """A usage error from the library says the command's option names, not the Python parameters'."""
    from remem.errors import ArgumentTypeError, RememUsageError

    try:
        yield
    except (RememUsageError, ArgumentTypeError) as exc:
        text = str(exc)
        for parameter, option in names.items():
            text = re.sub(rf"\b{parameter}\b", option, text)
        if text == str(exc):
            raise
        raise type(exc)(text) from exc


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
    "--budget", type=int, default=None, help="Token budget of the card (default: the memory client's)."
)
@click.option("--refresh", is_flag=True, help="Extend the stored summary first (writes a new revision).")
@db_option
@api_key_option
@json_option
def card_command(
    thread_id: str,
    except_last: int,
    recent: int,
    query: str | None,
    budget: int | None,
    refresh: bool,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Print a thread's context card (the XML an agent would be sent), from the summary as stored.

    Example: remem card support-42 --except-last 3
    """
    from remem.cli._render import clean, emit_json, say
    from remem.cli._sources import REMOTE_KIND, inspect_database, open_thread
    from remem.config import load_settings
    from remem.memory import DEFAULT_CARD_TOKEN_BUDGET, Memory

    settings = load_settings()
    url = database_url_of(database_url)
    db = inspect_database(url, for_writing=refresh)  # the file must exist, even to refresh
    with open_thread(db, thread_id, settings) as source:
        thread = source.thread
        boundary = max(source.thread.info().message_count - max(except_last, recent), 0)
        if refresh or source.from_checkpoints or db.kind == REMOTE_KIND:
            reader = thread  # a server's card is the server's (its summariser, its store)
        else:
            view = Memory(
                _read_only(source.memory.store),
                summarizer=_StoredSummaryOnly(),
                token_counter=source.memory.token_counter,
            )
            reader = view.get_thread(thread_id)
        with _option_names(_CARD_OPTIONS):
            card = reader.get_context_card(
                except_last_messages=except_last,
                max_recent_messages=recent,
                query=query,
                token_budget=DEFAULT_CARD_TOKEN_BUDGET if budget is None else budget,
            )
        stored = _latest_summary(thread, boundary)
    revision = stored.revision if stored is not None else 0
    covered = stored.covered_count if stored is not None else 0
    status = "computed now" if source.from_checkpoints else _stale_note("card", thread_id, covered, boundary)
    if as_json:
        emit_json(
            {
                "source": source.described,
                "thread": thread_id,
                "content": card.content,
                "token_count": card.token_count,
                "summary_revision": None if source.from_checkpoints else revision,
                "summary_covers": covered,
                "messages_before_tail": boundary,
                "summary_status": status,
                "records": [r.id for r in card.records],
                "recent": [m.id for m in card.recent],
            }
        )
        return
    if card.content:
        click.echo(clean(card.content))  # XML-escaped already; control characters still need showing
    else:
        say(f"thread {thread_id} has nothing to put in a card yet (the card is empty)")
    summary_part = "summary computed now" if source.from_checkpoints else f"summary revision {revision}"
    say(
        f"{card.token_count} tokens, {summary_part}, {len(card.records)} relevant records, "
        f"{len(card.recent)} recent messages"
    )
    say(f"summary: {status}" if not source.from_checkpoints else "summary: computed now, not stored")
    say(f"read from {source.described}")


def database_url_of(given: str | None) -> str:
    return database_url(given)


def _summary_json(summary: Summary | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {
        "text": summary.text,
        "revision": summary.revision,
        "covered_count": summary.covered_count,
        "first_message_id": summary.first_message_id,
        "last_message_id": summary.last_message_id,
        "created_at": summary.created_at,
        "model": summary.model,
    }


@click.command("summary")
@click.argument("thread_id")
@click.option("--except-last", default=0, show_default=True, help="Leave the last N messages out.")
@click.option(
    "--budget", default=1000, show_default=True, help="Token budget of the summary (with --refresh)."
)
@click.option("--refresh", is_flag=True, help="Bring the summary up to date first (writes a new revision).")
@db_option
@api_key_option
@json_option
def summary_command(
    thread_id: str, except_last: int, budget: int, refresh: bool, database_url: str | None, as_json: bool
) -> None:
    """Print a thread's summary as stored, and whether messages came after it.

    Example: remem summary support-42 --refresh
    """
    from remem.cli._render import emit_json, say
    from remem.cli._sources import inspect_database, open_thread
    from remem.config import load_settings
    from remem.errors import RememUsageError

    if except_last < 0:
        raise RememUsageError("--except-last must be 0 or more")
    settings = load_settings()
    url = database_url_of(database_url)
    db = inspect_database(url, for_writing=refresh)  # the file must exist, even to refresh
    with open_thread(db, thread_id, settings) as source:
        boundary = max(source.thread.info().message_count - except_last, 0)
        if refresh or source.from_checkpoints:
            summary: Summary | None = source.thread.get_summary(except_last=except_last, token_budget=budget)
        else:
            summary = _latest_summary(source.thread, boundary)
    covered = summary.covered_count if summary is not None else 0
    status = (
        "computed now, not stored"
        if source.from_checkpoints
        else (_stale_note("summary", thread_id, covered, boundary))
    )
    if as_json:
        emit_json(
            {
                "source": source.described,
                "thread": thread_id,
                "summary": _summary_json(summary),
                "messages_before_tail": boundary,
                "status": status,
            }
        )
        return
    if summary is None or (not summary.revision and not summary.text):
        say(f"thread {thread_id}: no summary stored yet ({boundary} messages); --refresh writes one")
    else:
        if source.from_checkpoints:
            say(
                f"thread {thread_id}  computed now: the agent's rolling summary (if any) and the "
                f"{summary.covered_count} messages in its state"
            )
        else:
            say(
                f"thread {thread_id}  revision {summary.revision}  covers {summary.covered_count} messages "
                f"({summary.first_message_id or '-'} .. {summary.last_message_id or '-'})"
            )
        say(summary.text or "(the summary is empty)")
        say(f"summary: {status}")
    say(f"read from {source.described}")


def _merge(records: Iterable[MemoryRecord], k: int) -> list[MemoryRecord]:
    # Every source's scores say its order (Memory.search), so one sort by score merges them.
    return sorted(records, key=lambda r: (-r.score, r.id))[:k]


@click.command("search")
@click.argument("query")
@click.option("--user", "user_id", default=None, help="Search this user's long-term memories.")
@click.option("--thread", "thread_id", default=None, help="Search this thread's messages.")
@click.option("--type", "types", multiple=True, help="Keep only this record type (repeatable).")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(min=0), help="Records to show.")
@db_option
@api_key_option
@full_option
@json_option
def search_command(
    query: str,
    user_id: str | None,
    thread_id: str | None,
    types: tuple[str, ...],
    k: int,
    database_url: str | None,
    full: bool,
    as_json: bool,
) -> None:
    """Search a user's memories and a thread's messages (hybrid keyword + vector).

    Example: remem search "which step fails" --user maya --thread support-42
    """
    from remem.cli._render import emit_json, preview, say, show_table
    from remem.cli._sources import inspect_database, open_memory, open_thread
    from remem.config import load_settings
    from remem.errors import NotFoundError, RememUsageError
    from remem.memory._search import descending, summary_record

    if user_id is None and thread_id is None:
        raise RememUsageError(
            "search needs --user USER_ID, --thread THREAD_ID or both: say whose memory to search"
        )
    settings = load_settings()
    db = inspect_database(database_url_of(database_url))
    wanted = list(types) or None
    records: list[MemoryRecord] = []
    summary: MemoryRecord | None = None  # an agent's rolling summary, after the other matches
    read: list[str] = []
    if thread_id is not None:
        with open_thread(db, thread_id, settings, whole_history=True) as source:
            read.append(source.described.replace("latest state", "checkpoints' messages"))
            if not source.from_checkpoints:
                records = source.memory.search(query, user_id=user_id, thread_id=thread_id, types=wanted, k=k)
            else:
                # An agent's thread: its messages are searched in the scratch copy, the user's memories in
                # the database's store; both are remem stores, so their scores rank alike.
                records = source.memory.search(query, thread_id=thread_id, types=wanted, k=k)
                found = summary_record(source.rolling, query, thread_id, 0)
                summary = found if wanted is None or "summary" in wanted else None
                if user_id is not None and source.stored is None:
                    raise NotFoundError(f"{db.shown} has no memory store, so no memories of user {user_id!r}")
                if user_id is not None and source.stored is not None:
                    records += source.stored.search(query, user_id=user_id, types=wanted, k=k)
                    read.append(f"memory store in {db.shown}")
    else:
        with open_memory(db, settings) as memory:
            if memory is None:
                raise NotFoundError(
                    f"{db.shown} has no memory store, so no memories of user {user_id!r}; check --db"
                )
            records = memory.search(query, user_id=user_id, types=wanted, k=k)
            read.append(f"memory store in {db.shown}")
    records = descending([*_merge(records, k), *([summary] if summary else [])])[:k]
    if thread_id is None and not records:
        hint = (
            f"nothing found in the long-term memories of user {user_id!r} (what extraction or memory tools "
            "stored); the user's own turns are searched with --thread THREAD_ID (`remem threads` lists them)"
        )
    else:
        hint = ""
    if as_json:
        emit_json(
            {
                "source": read,
                "query": query,
                **({"hint": hint} if hint else {}),
                "records": [
                    {
                        "score": r.score,
                        "type": r.type,
                        "id": r.id,
                        "status": r.status,
                        "sources": list(r.source_message_ids),
                        "content": r.content,
                        "metadata": r.metadata,
                    }
                    for r in records
                ],
            }
        )
        return
    show_table(
        f"{len(records)} records for {query!r}",
        ["score", "type", "id", "status", "sources", "content"],
        (
            (
                f"{r.score:.3f}",
                r.type,
                r.id,
                r.status,
                ", ".join(r.source_message_ids),
                preview(r.content, full=full),
            )
            for r in records
        ),
    )
    say("read from " + "; ".join(read))
    if hint:
        say(hint)


COMMANDS: list[click.Command] = [card_command, summary_command, search_command]
