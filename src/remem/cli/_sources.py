"""Which database a command reads, what it holds, and where a thread's messages are.

Reads never write: a reading command first looks at the database through a read-only connection (a
missing SQLite file is an error, not a new empty file; a database without remem's store tables is not
given any), and only then opens the parts that are there.

One notion of a thread: a thread may live in the memory client's store (``Memory.thread``) or only in
remem's checkpointer (an agent's thread, as ``remem state`` shows it). :func:`open_thread` finds it in
either; for a checkpoint-only thread its latest messages are copied into a scratch memory in this process
(nothing is written to the database), so that ``card``, ``summary`` and ``search`` work on it too.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click

from remem._files import make_private_file
from remem._url import describe_postgres, display_url, parse_database_url
from remem.errors import ConfigError, NotFoundError, StorageError
from remem.layout import CHECKPOINT_TABLES, STOCK_CHECKPOINT_TABLES, STORE_TABLES, USAGE_LEDGER_TABLE

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from remem.config import Settings
    from remem.memory import Memory, Thread
    from remem.memory._remote import RemoteMemory
    from remem.summarize import SummaryResult

__all__ = [
    "Database",
    "ThreadSource",
    "checkpoint_state",
    "checkpoint_values",
    "inspect_database",
    "open_thread",
    "writable",
]

# The tables that say which of remem's parts a database holds.
STORE_TABLE = STORE_TABLES[1]  # remem_items
CHECKPOINT_TABLE = CHECKPOINT_TABLES[3]  # remem_cp_checkpoints


@dataclass(frozen=True)
class Database:
    """A database as a command found it: its URL, how it may be shown, and which parts it holds."""

    url: str
    shown: str
    kind: str
    has_store: bool
    has_checkpoints: bool
    has_stock_checkpoints: bool = False  # stock tables only: what remem's commands cannot read
    holds_stock_tables: bool = False  # stock tables, with or without remem's (what `remem import` copies)
    has_ledger: bool = False  # remem's usage ledger


def _sqlite_tables(path: Path) -> set[str]:
    if not path.is_file():
        raise NotFoundError(f"there is no database at {path}; check --db or REMEM_DATABASE_URL")
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StorageError(
            f"cannot read {path} as a SQLite database ({exc}); check --db, or restore the file from a backup"
        ) from None


_PG_STOCK_WRITES = "checkpoint_writes"  # the stock PostgresSaver's writes table (SqliteSaver's: writes)


def _postgres_tables(dsn: str) -> set[str]:
    import psycopg

    names = [STORE_TABLE, CHECKPOINT_TABLE, USAGE_LEDGER_TABLE, *STOCK_CHECKPOINT_TABLES, _PG_STOCK_WRITES]
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.read_only = True
            rows = conn.execute("SELECT n, to_regclass(n) IS NOT NULL FROM unnest(%s::text[]) AS n", [names])
            return {str(name) for name, present in rows.fetchall() if present}
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StorageError(
            f"cannot connect to PostgreSQL at {describe_postgres(dsn)} ({reason}); "
            "check that the server is running and that --db or REMEM_DATABASE_URL is right"
        ) from None


def _read_only_copy(path: Path) -> str:
    """A private temporary copy of a SQLite file this process may not write (removed when the command ends).

    SQLite's readers still write (the WAL index, the journal mode), so a read-only file is read from a copy
    rather than refused; the original is never opened for writing.
    """
    import atexit
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="remem-ro-"))  # 0700
    for suffix in ("", "-wal"):
        source = Path(str(path) + suffix)
        if source.exists():
            shutil.copyfile(source, folder / (path.name + suffix))
    remove = functools.partial(shutil.rmtree, folder, ignore_errors=True)
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(remove)
    else:
        atexit.register(remove)
    return f"sqlite:///{folder / path.name}"


def _why_read_only(path: Path) -> str:
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except OSError:
        pass
    return "this user may not write the file or its folder"


def _writable_file(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


REMOTE_KIND = "remote"  # a `remem serve` URL: its memory, read through the server's API
API_KEY_ENV = "REMEM_API_KEY"


def is_server_url(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def api_key() -> str | None:
    """The key for a ``remem serve`` URL: --api-key, else ``REMEM_API_KEY``."""
    from remem.cli._options import given_api_key

    given = given_api_key()
    return given if given is not None else (os.environ.get(API_KEY_ENV) or None)


def inspect_database(url: str, *, for_writing: bool = False) -> Database:
    """What the database at ``url`` holds, found without writing to it (or creating it).

    A SQLite file this process cannot write is read from a private copy, unless ``for_writing``. A
    ``remem serve`` URL (``http(s)://HOST:PORT``) is its memory store, read through the server (the key
    from --api-key or ``REMEM_API_KEY``): its memory store, and its checkpoints and usage ledger through
    the ``/v1`` endpoints made for these commands (:func:`open_remote`, :func:`open_ledger`).
    """
    from remem.cli._options import given_api_key

    if given_api_key() is not None and not is_server_url(url):
        raise ConfigError("--api-key is for a remem serve URL given as --db http(s)://HOST:PORT")
    if is_server_url(url):
        return Database(
            url=url, shown=f"remem serve at {url}", kind=REMOTE_KIND, has_store=True, has_checkpoints=False
        )
    parsed = parse_database_url(url)
    shown = display_url(url)
    if parsed.kind == "memory":
        tables: set[str] = set()
    elif parsed.kind == "sqlite" and parsed.target == ":memory:":
        tables = set()
    elif parsed.kind == "sqlite":
        path = parsed.sqlite_path
        if path.is_file() and not _writable_file(path):
            # SQLite's readers write beside the file (the WAL index): on a read-only file system or folder
            # even a read-only open fails, so the file is read from a private copy, its tables too.
            if for_writing:
                raise StorageError(
                    f"{path} is read-only ({_why_read_only(path)}); this command writes to it: run it where "
                    "the file can be written, or on a writable copy (--db sqlite:///COPY)"
                )
            url = _read_only_copy(path)
            tables = _sqlite_tables(parse_database_url(url).sqlite_path)
        else:
            tables = _sqlite_tables(path)
    else:
        tables = _postgres_tables(parsed.target)
    return Database(
        url=url,
        shown=shown,
        kind=parsed.kind,
        has_store=STORE_TABLE in tables,
        has_checkpoints=CHECKPOINT_TABLE in tables,
        has_stock_checkpoints=CHECKPOINT_TABLE not in tables and set(STOCK_CHECKPOINT_TABLES) <= tables,
        holds_stock_tables=STOCK_CHECKPOINT_TABLES[0] in tables
        and bool(tables & {STOCK_CHECKPOINT_TABLES[1], _PG_STOCK_WRITES}),
        has_ledger=USAGE_LEDGER_TABLE in tables,
    )


def writable(url: str) -> str:
    """``url`` for a command that writes: a SQLite file is created owner-only (0600, its folder 0700) first."""
    parsed = parse_database_url(url)
    if parsed.kind == "sqlite" and parsed.target != ":memory:":
        if parsed.sqlite_path.is_file() and parsed.sqlite_path.stat().st_size:
            _sqlite_tables(parsed.sqlite_path)  # a file that is no database fails here, before any work
        try:
            make_private_file(parsed.sqlite_path)
        except OSError as exc:
            raise StorageError(
                f"cannot create the SQLite file {parsed.target} ({exc.strerror or exc}); "
                "check the path and its permissions"
            ) from None
    return url


def require_persistent(url: str) -> str:
    """``url``, unless it is memory:// (a new, empty database in every process)."""
    if is_server_url(url):
        return url
    if parse_database_url(url).kind == "memory":
        raise ConfigError(
            "memory:// keeps nothing between runs; pass --db sqlite:///PATH or postgresql://..."
        )
    return url


@contextmanager
def open_checkpointer(db: Database, *, write: bool = False) -> Iterator[BaseCheckpointSaver[Any] | None]:
    """remem's checkpointer on ``db``, or None when it holds no checkpoints (nothing is created).

    It opens read-only unless ``write`` is set (``checkpoints prune``)."""
    if not db.has_checkpoints:
        yield None
        return
    from remem.checkpoint import checkpointer_from_url

    with checkpointer_from_url(db.url, create=write) as saver:
        yield saver


def checkpoint_values(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, Any] | None:
    """The channel values of the thread's latest checkpoint (root graph); None when there is no such thread."""
    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    if found is None:
        return None
    return dict(found.checkpoint.get("channel_values") or {})


def checkpoint_state(saver: BaseCheckpointSaver[Any], thread_id: str) -> tuple[list[BaseMessage], str] | None:
    """The messages and the rolling summary of the thread's latest checkpoint (any graph with a
    ``messages`` channel; the summary is remem's agent's ``summary`` channel); None when there is no such
    thread."""
    values = checkpoint_values(saver, thread_id)
    if values is None:
        return None
    summary = values.get("summary")
    return list(values.get("messages") or []), summary if isinstance(summary, str) else ""


@contextmanager
def open_memory(db: Database, settings: Settings) -> Iterator[Memory | None]:
    """The memory client on ``db``'s store, or None when the database has no store tables."""
    if not db.has_store:
        yield None
        return
    from remem.memory import Memory

    if db.kind == REMOTE_KIND:
        with open_remote(db) as remote:
            yield remote
        return
    with Memory.from_url(db.url, settings=settings) as memory:
        yield memory


@contextmanager
def open_remote(db: Database) -> Iterator[RemoteMemory]:
    """The client of the ``remem serve`` that ``db`` is (its kind is :data:`REMOTE_KIND`)."""
    from remem.memory._remote import RemoteMemory

    remote = RemoteMemory(db.url, api_key=api_key())
    try:
        yield remote
    finally:
        remote.close()


class _RemoteLedger:
    """A server's usage ledger as the tenant sees it, with the reading methods of ``Ledger`` the commands
    call (``events``, ``totals``)."""

    def __init__(self, remote: RemoteMemory) -> None:
        self.remote = remote

    def events(self, **filters: Any) -> list[Any]:
        return self.remote.usage_events(**filters)

    def totals(self, **filters: Any) -> list[Any]:
        return self.remote.usage_totals(**filters)


@contextmanager
def open_ledger(db: Database) -> Iterator[Any]:
    """The usage ledger of ``db`` for reading (a server's through its API), or None when it has none."""
    if db.kind == REMOTE_KIND:
        with open_remote(db) as remote:
            yield _RemoteLedger(remote)
        return
    from remem.usage import read_ledger

    with read_ledger(db.url) as ledger:
        yield ledger


@dataclass
class ThreadSource:
    """Where a command found a thread: the memory holding it and a sentence saying which store that is."""

    memory: Memory
    thread: Thread
    described: str
    from_checkpoints: bool
    stored: Memory | None  # the database's own memory client (for a user's long-term memories)
    rolling: str = ""  # an agent's rolling summary (from the checkpoints)


class _AfterRollingSummary:
    """The extractive summariser, started from the agent's rolling summary: an agent that summarised
    removed the older messages from its state, and its summary is all that is left of them."""

    def __init__(self, rolling: str, max_tokens: int) -> None:
        from remem.summarize import ExtractiveSummarizer

        self.rolling = rolling
        self.inner = ExtractiveSummarizer(max_tokens=max_tokens)

    def summarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        return self.inner.summarize(previous or self.rolling, messages)

    async def asummarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        return self.summarize(previous, messages)


def _scratch_memory(settings: Settings, rolling: str, stack: ExitStack) -> Memory:
    from remem.memory import Memory

    # Same store kind and index as the database's, in this process only: nothing reaches the database.
    summarizer = _AfterRollingSummary(rolling, settings.summary_max_tokens)
    scratch = Memory.from_url("sqlite:///:memory:", settings=settings, summarizer=summarizer)
    stack.callback(scratch.close)
    return scratch


def _copyable(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    from remem.messages import is_derived

    return [m for m in messages if not is_derived(m)]


def history_messages(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[BaseMessage]:
    """Every message the thread's checkpoints (root graph) ever held, once each, in the order they first
    appeared: the turns a summary or a delete removed from the state are in the older checkpoints."""
    from langchain_core.messages import BaseMessage

    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    seen: dict[str, BaseMessage] = {}
    unnamed: list[BaseMessage] = []
    for found in reversed(list(saver.list(config))):
        for message in (found.checkpoint.get("channel_values") or {}).get("messages") or []:
            if not isinstance(message, BaseMessage):
                continue
            if message.id is None:
                unnamed.append(message)
            elif message.id not in seen:
                seen[message.id] = message
    return [*seen.values(), *unnamed]


@contextmanager
def open_thread(
    db: Database, thread_id: str, settings: Settings, *, whole_history: bool = False
) -> Iterator[ThreadSource]:
    """The thread ``thread_id`` from the memory store, else from the checkpoints (see the module docstring).

    From the checkpoints: the latest state's messages, or with ``whole_history`` every message the
    thread's checkpoints hold (``search``: turns a summary replaced are found too).
    :class:`NotFoundError` names both places when it is in neither.
    """
    with ExitStack() as stack:
        memory = stack.enter_context(open_memory(db, settings))
        if memory is not None:
            try:
                thread = memory.get_thread(thread_id)
            except NotFoundError:
                pass
            else:
                yield ThreadSource(memory, thread, f"memory store in {db.shown}", False, memory)
                return
        saver = stack.enter_context(open_checkpointer(db))
        state = checkpoint_state(saver, thread_id) if saver is not None else None
        if state is None:
            raise NotFoundError(
                f"thread {thread_id!r} is neither in the memory store nor in the checkpoints of {db.shown}; "
                "`remem threads` lists the threads there"
            )
        messages, rolling = state
        if whole_history and saver is not None:
            messages = history_messages(saver, thread_id)
        scratch = _scratch_memory(settings, rolling, stack)
        thread = scratch.thread(thread_id)
        thread.add_messages(_copyable(messages))
        described = f"checkpoints in {db.shown} (the agent's latest state; computed now, nothing stored)"
        yield ThreadSource(scratch, thread, described, True, memory, rolling)
