"""The ingestion journal: one entry per ingestion in ``("_remem", "ingestions")``, read and rewritten here."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.store.base import BaseStore, Item, PutOp

from remem._clock import now_iso
from remem._lease import thread_lease
from remem.errors import ArgumentTypeError, NotFoundError
from remem.layout import INGESTION_MEMORY_KEY, INGESTION_MESSAGE_KEY, ingestions_root
from remem.store._targets import fenced_batch, store_lease_target

if TYPE_CHECKING:
    from remem.memory import Memory

MESSAGE_TAG = INGESTION_MESSAGE_KEY
"""The key of a message's metadata that holds the id of the ingestion that added it."""
MEMORY_TAG = INGESTION_MEMORY_KEY
"""The key of a memory's value that holds the id of the ingestion that loaded it."""
STATES = ("open", "done", "undoing", "undone")
_PAGE = 500
_COUNTS = (
    "messages",
    "memories",
    "memories_restored",
    "summaries_stale",
    "threads_removed",
    "jobs",
    "checkpoint_threads",
)


@dataclass
class IngestionEntry:
    """One ingestion as recorded: ``state`` is ``open`` (writing, or killed while writing), ``done``,
    ``undoing`` (an undo started; run it again to finish it) or ``undone``."""

    id: str
    kind: str
    source: str
    state: str
    started_at: str
    finished_at: str | None = None
    threads: dict[str, bool] = field(default_factory=dict)  # thread id -> created by this ingestion
    users: list[str] = field(default_factory=list)
    added: dict[str, int] = field(default_factory=dict)
    watermarks: dict[str, str | None] = field(default_factory=dict)  # extraction runs: thread -> mark before
    imported: dict[str, str] = field(
        default_factory=dict
    )  # imports: thread -> its head checkpoint ("": going)
    undo: dict[str, Any] = field(default_factory=dict)

    def to_value(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> IngestionEntry:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in value.items() if k in names})

    def as_row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "source": self.source,
            "state": self.state,
            "started": self.started_at,
            "threads": len(self.threads),
            "messages": self.added.get("messages", 0),
            "memories": self.added.get("memories", 0),
        }


@dataclass
class UndoReport:
    """What undoing one ingestion removed, over every run the undo took."""

    ingestion_id: str
    messages: int = 0
    memories: int = 0
    memories_restored: int = 0
    summaries_stale: int = 0
    threads_removed: int = 0
    jobs: int = 0
    checkpoint_threads: int = 0
    runs: int = 1

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("ingestion", self.ingestion_id),
            ("messages removed", str(self.messages)),
            ("memories removed", str(self.memories)),
            ("memories made valid again", str(self.memories_restored)),
            ("summary revisions marked stale", str(self.summaries_stale)),
            ("threads removed whole", str(self.threads_removed)),
            ("queued jobs removed or cut", str(self.jobs)),
            ("threads' checkpoints deleted", str(self.checkpoint_threads)),
            ("runs it took", str(self.runs)),
        ]


def _put_entry(entry: IngestionEntry, root: tuple[str, ...] = ingestions_root()) -> PutOp:
    return PutOp(root, entry.id, entry.to_value(), index=False)


def _all(store: BaseStore, namespace: tuple[str, ...]) -> list[Item]:
    found: list[Item] = []
    while True:
        page = store.search(namespace, limit=_PAGE, offset=len(found))
        found.extend(item for item in page if item.namespace == namespace)
        if len(page) < _PAGE:
            return found


def _store(memory: Memory) -> BaseStore:
    from remem.memory import Memory  # erasure imports this module for forget_in_journal, without the client

    if not isinstance(memory, Memory):
        raise ArgumentTypeError(
            f"ingestions take a remem Memory on a database (Memory.from_url); got {type(memory).__name__}"
        )
    return memory.store


def list_ingestions(memory: Memory) -> list[IngestionEntry]:
    """Every recorded ingestion, oldest first."""
    items = _all(_store(memory), ingestions_root())
    entries = [IngestionEntry.from_value(item.value) for item in items]
    return sorted(entries, key=lambda e: (e.started_at, e.id))


def get_ingestion(memory: Memory, ingestion_id: str) -> IngestionEntry:
    """The entry of one ingestion; :class:`~remem.errors.NotFoundError` when there is none."""
    item = _store(memory).get(ingestions_root(), ingestion_id)
    if item is None:
        raise NotFoundError(f"no ingestion {ingestion_id!r}; `remem ingest list` shows the ones recorded")
    return IngestionEntry.from_value(item.value)


def _without(entry: IngestionEntry, user_id: str | None, thread_ids: set[str]) -> IngestionEntry:
    undo = entry.undo
    gone = {f"thread:{t}" for t in thread_ids} | ({f"user:{user_id}"} if user_id is not None else set())
    return dataclasses.replace(
        entry,
        threads={t: created for t, created in entry.threads.items() if t not in thread_ids},
        watermarks={t: mark for t, mark in entry.watermarks.items() if t not in thread_ids},
        imported={t: head for t, head in entry.imported.items() if t not in thread_ids},
        users=[u for u in entry.users if u != user_id],
        undo={
            **undo,
            "done": [step for step in undo.get("done", []) if step not in gone],
            "removed": {t: ids for t, ids in undo.get("removed", {}).items() if t not in thread_ids},
            "thread_users": {
                t: u for t, u in undo.get("thread_users", {}).items() if t not in thread_ids and u != user_id
            },
        },
    )


def forget_in_journal(
    store: BaseStore,
    *,
    user_id: str | None,
    thread_ids: Sequence[str],
    timeout: float,
    tenant: str | None = None,
) -> int:
    """Remove every mention of an erased user and of erased threads from the ingestion journal (called by
    :mod:`remem.erasure`, so no id of theirs outlives an erasure there); an entry that names no thread and
    no user any more is deleted. Each entry is rewritten under its ingestion's lease (the one an undo
    holds), so an undo in flight cannot write the ids back. Running it again changes nothing. Returns how
    many entries changed. ``tenant``: the journal in that tenant's slot (``store`` being the shared one)."""
    threads = set(thread_ids)
    root = ingestions_root(tenant=tenant)
    changed = 0
    for item in _all(store, root):
        entry = IngestionEntry.from_value(item.value)
        if user_id not in entry.users and not threads & set(entry.threads):
            continue
        with thread_lease(
            store_lease_target(store), f"_remem ingestion {entry.id}", scope="memory", timeout=timeout
        ) as lease:
            current = store.get(root, entry.id)
            if current is None:
                continue
            kept = _without(IngestionEntry.from_value(current.value), user_id, threads)
            write = _put_entry(kept, root) if kept.threads or kept.users else PutOp(root, entry.id, None)
            fenced_batch(store, [write], lease.fenced)
            changed += 1
    return changed


def _new_id() -> str:
    stamp = now_iso().replace("-", "").replace(":", "")
    return f"ing-{stamp}-{uuid.uuid4().hex[:8]}"
