"""Ingestions you can undo: a write batch from outside a turn, recorded with an id, removed as a whole.

    with begin_ingestion(memory, kind="load", source="crm-export.jsonl") as ing:
        ing.add_messages("support-42", [{"role": "user", "content": "I moved to Lyon."}], user_id="maya")
        ing.add_memories("maya", ["prefers email"])
    list_ingestions(memory)                       # newest last: id, kind, source, state, counts
    undo_ingestion(memory, last=True)             # or ingestion_id="ing-..."; remem ingest undo --last

What an ingestion writes carries its id: a message holds it in its metadata (``remem_ingestion``) and a
memory in its value (``ingestion``), written in the same store batch as the data, so nothing it wrote can
escape its undo, even when the load was killed half way. Its entry in the journal
(``("_remem", "ingestions")``, :func:`remem.layout.ingestions_root`) names the threads and users it
touched; a thread is named there before anything is written to it.

An undo removes, one step at a time:

1. **each thread** it wrote to, under the thread's lease: the messages it added (their vector and keyword
   rows go with them), the thread's order renumbered without them, the thread's counts, and every summary
   revision that covered one of them marked ``stale`` (the next ``get_summary`` or card builds from the
   revision before it; a card is built from summaries, so cards follow). A thread the ingestion created
   and that holds nothing else is removed whole. The extraction watermark moves back before them.
2. **each user** whose memories it may have changed: the memories it loaded, the memories extracted from
   the messages it added (any source among them), and a memory those had superseded made valid again.
3. **close**: the entry is ``undone``, with its totals.

Each step commits together with its mark in the entry (one store batch), so a run killed at any point
leaves an entry in state ``undoing`` that the next ``undo`` of the same ingestion goes on from, at the
first step not done, with exact totals. Undo is the journaled pattern of :mod:`remem.erasure`, on the
store (so it runs on every backend the memory client does).

Not covered: checkpoints (``remem import`` copies stock checkpoints; it is not an ingestion yet), and
extraction jobs still queued for the removed messages (park them with ``remem queue park``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from remem._clock import now_iso
from remem._lease import thread_lease
from remem.errors import ArgumentTypeError, NotFoundError, RememUsageError
from remem.extraction._schema import Candidate, memory_value
from remem.jobs import JobQueue, enqueue_summary_refresh
from remem.layout import (
    EXTRACTION_STATE_KEY,
    THREAD_META_KEY,
    chunk_key,
    extraction_state,
    ingestions_root,
    thread_messages,
    thread_meta,
    thread_order,
    thread_summaries,
    user_memories,
)
from remem.memory import Memory
from remem.memory._records import ORDER_CHUNK, StoredMessage, ThreadInfo, stored_message_from_input
from remem.store._targets import store_lease_target

__all__ = [
    "MEMORY_TAG",
    "MESSAGE_TAG",
    "Ingestion",
    "IngestionEntry",
    "UndoReport",
    "begin_ingestion",
    "forget_in_journal",
    "get_ingestion",
    "list_ingestions",
    "undo_ingestion",
]

MESSAGE_TAG = "remem_ingestion"
"""The key of a message's metadata that holds the id of the ingestion that added it."""
MEMORY_TAG = "ingestion"
"""The key of a memory's value that holds the id of the ingestion that loaded it."""
STATES = ("open", "done", "undoing", "undone")
_PAGE = 500
_COUNTS = ("messages", "memories", "memories_restored", "summaries_stale", "threads_removed")

_on_step: Callable[[str], None] | None = None
"""Called with each undo step's name ("thread:T", "user:U", "closed") once it has committed: the seam crash
tests use to stop a real process at a chosen point. Leave it None."""


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
    runs: int = 1

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("ingestion", self.ingestion_id),
            ("messages removed", str(self.messages)),
            ("memories removed", str(self.memories)),
            ("memories made valid again", str(self.memories_restored)),
            ("summary revisions marked stale", str(self.summaries_stale)),
            ("threads removed whole", str(self.threads_removed)),
            ("runs it took", str(self.runs)),
        ]


# ---------------------------------------------------------------- the journal


def _put_entry(entry: IngestionEntry) -> PutOp:
    return PutOp(ingestions_root(), entry.id, entry.to_value(), index=False)


def _all(store: BaseStore, namespace: tuple[str, ...]) -> list[Item]:
    found: list[Item] = []
    while True:
        page = store.search(namespace, limit=_PAGE, offset=len(found))
        found.extend(item for item in page if item.namespace == namespace)
        if len(page) < _PAGE:
            return found


def _store(memory: Memory) -> BaseStore:
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
    store: BaseStore, *, user_id: str | None, thread_ids: Sequence[str], timeout: float
) -> int:
    """Remove every mention of an erased user and of erased threads from the ingestion journal (called by
    :mod:`remem.erasure`, so no id of theirs outlives an erasure there); an entry that names no thread and
    no user any more is deleted. Each entry is rewritten under its ingestion's lease (the one an undo
    holds), so an undo in flight cannot write the ids back. Running it again changes nothing. Returns how
    many entries changed."""
    threads = set(thread_ids)
    changed = 0
    for item in _all(store, ingestions_root()):
        entry = IngestionEntry.from_value(item.value)
        if user_id not in entry.users and not threads & set(entry.threads):
            continue
        with thread_lease(
            store_lease_target(store), f"_remem ingestion {entry.id}", scope="memory", timeout=timeout
        ):
            current = store.get(ingestions_root(), entry.id)
            if current is None:
                continue
            kept = _without(IngestionEntry.from_value(current.value), user_id, threads)
            if kept.threads or kept.users:
                store.batch([_put_entry(kept)])
            else:
                store.delete(ingestions_root(), entry.id)
            changed += 1
    return changed


# ---------------------------------------------------------------- ingesting


def _new_id() -> str:
    stamp = now_iso().replace("-", "").replace(":", "")
    return f"ing-{stamp}-{uuid.uuid4().hex[:8]}"


class Ingestion:
    """An open ingestion: what it writes carries its id. Use it as a context manager, or :meth:`close` it."""

    def __init__(self, memory: Memory, entry: IngestionEntry, queue: JobQueue | None = None) -> None:
        self.memory = memory
        self.entry = entry
        self.queue = queue
        self._saved: tuple[set[str], set[str]] = (set(entry.users), set(entry.threads))

    @property
    def id(self) -> str:
        return self.entry.id

    def __enter__(self) -> Ingestion:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A failed load stays "open": what it wrote is still undoable with its id.
        if kind is None:
            self.close()

    def _save(self) -> None:
        """Write the entry under its ingestion's lease (the fence :func:`forget_in_journal` and an undo
        hold), merged with the stored one: a user or thread named before and missing there now was erased
        meanwhile, and stays out (a whole write would put the erased ids back)."""
        store = self.memory.store
        fence = f"_remem ingestion {self.id}"
        with thread_lease(
            store_lease_target(store), fence, scope="memory", timeout=self.memory.thread_lease_timeout
        ):
            item = store.get(ingestions_root(), self.id)
            stored = IngestionEntry.from_value(item.value) if item is not None else None
            if stored is not None and stored.state in ("undoing", "undone"):
                raise RememUsageError(
                    f"ingestion {self.id} was undone while it was loading; load again as a new ingestion"
                )
            users, threads = self._saved
            erased_threads = threads - set(stored.threads if stored is not None else ())
            for user_id in sorted(users - set(stored.users if stored is not None else ())):
                self.entry = _without(self.entry, user_id, erased_threads)
            self.entry = _without(self.entry, None, erased_threads)
            if stored is None and not (self.entry.threads or self.entry.users):
                return  # erased whole while loading: nothing of it left to name
            store.batch([_put_entry(self.entry)])
            self._saved = (set(self.entry.users), set(self.entry.threads))

    def _count(self, what: str, n: int) -> None:
        self.entry.added[what] = self.entry.added.get(what, 0) + n

    def add_messages(
        self,
        thread_id: str,
        messages: Sequence[Any],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[StoredMessage]:
        """Append ``messages`` to the thread (opened for ``user_id`` when new), each tagged with this
        ingestion's id; returns them as stored (one the thread already held keeps its first version)."""
        if isinstance(messages, str | Mapping) or not isinstance(messages, Sequence):
            raise RememUsageError("add_messages takes a list of messages; wrap a single message in a list")
        tagged = [self._tagged(m, n) for n, m in enumerate(messages)]
        if thread_id not in self.entry.threads:
            created = self.memory.store.get(thread_meta(thread_id), THREAD_META_KEY) is None
            self.entry.threads[thread_id] = created
            self._save()  # named before anything is written to it
        thread = self.memory.thread(thread_id, user_id=user_id, agent_id=agent_id)
        stored = thread.add_messages(tagged)
        self._count("messages", sum(1 for m in stored if m.metadata.get(MESSAGE_TAG) == self.id))
        return stored

    def _tagged(self, message: Any, position: int) -> dict[str, Any]:
        if isinstance(message, BaseMessage):
            parsed = stored_message_from_input(message, position)
            message = {
                "role": parsed.role,
                "content": parsed.content,
                "id": parsed.id,
                "timestamp": parsed.timestamp,
                "metadata": parsed.metadata,
            }
        if not isinstance(message, Mapping):
            raise RememUsageError(
                f"message {position} is a {type(message).__name__}; send a dict such as "
                "{'role': 'user', 'content': 'text'} or a LangChain message"
            )
        metadata = message.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise RememUsageError(f"message {position}: 'metadata' must be a dict")
        return {**message, "metadata": {**metadata, MESSAGE_TAG: self.id}}

    def add_memories(self, user_id: str, memories: Sequence[str | Mapping[str, Any]]) -> list[str]:
        """Store long-term memories of ``user_id`` (texts, or dicts with ``text``, optional ``kind`` and
        ``confidence``), tagged with this ingestion's id; returns their ids."""
        if isinstance(memories, str | Mapping) or not isinstance(memories, Sequence):
            raise RememUsageError("add_memories takes a list of memories; wrap a single one in a list")
        if user_id not in self.entry.users:
            self.entry.users.append(user_id)
            self._save()
        puts: list[PutOp] = []
        start = self.entry.added.get("memories", 0)
        for n, memory in enumerate(memories):
            given: dict[str, Any] = {"text": memory} if isinstance(memory, str) else dict(memory)
            try:
                candidate = Candidate(
                    kind=given.get("kind", "fact"),
                    text=given.get("text", given.get("content", "")),
                    confidence=given.get("confidence", 0.7),
                )
            except ValueError as exc:
                raise RememUsageError(
                    f"memory {n}: {exc.errors()[0]['msg'] if hasattr(exc, 'errors') else exc}; give it a "
                    "'text' of 1-2000 characters and a kind such as 'fact' or 'preference'"
                ) from None
            value = memory_value(candidate, user_id=user_id, thread_id="", source_ids=(), source_time=None)
            value.update(thread_id=None, origin="import", **{MEMORY_TAG: self.id})
            key = "mem-" + hashlib.sha256(f"{self.id}/{start + n}".encode()).hexdigest()[:24]
            puts.append(PutOp(user_memories(user_id), key, value))
        self.memory.store.batch(puts)
        self._count("memories", len(puts))
        return [p.key for p in puts]

    def close(self) -> None:
        """Mark the ingestion done (a load that failed half way stays ``open``, and is undone the same way);
        with a ``queue``, a summary refresh of every thread it wrote to is queued for the workers."""
        if self.entry.state == "open":
            self.entry.state = "done"
            self.entry.finished_at = now_iso()
            self._save()
            _refresh(self.queue, self.entry.threads)


def begin_ingestion(
    memory: Memory, *, kind: str, source: str = "", queue: JobQueue | None = None
) -> Ingestion:
    """Record a new ingestion (state ``open``) and return it to write through; ``queue``: where the summary
    refreshes of the threads it writes are queued when it is closed (:data:`remem.jobs.SUMMARY_JOB`)."""
    store = _store(memory)
    entry = IngestionEntry(id=_new_id(), kind=kind, source=source, state="open", started_at=now_iso())
    store.batch([_put_entry(entry)])
    ingestion = Ingestion(memory, entry, queue)
    ingestion._saved = (set(), set())
    return ingestion


def _refresh(queue: JobQueue | None, threads: Mapping[str, Any]) -> None:
    if queue is not None:
        for thread_id in sorted(threads):
            enqueue_summary_refresh(queue, thread_id)


# ---------------------------------------------------------------- undoing


def _pick(memory: Memory, ingestion_id: str | None, last: bool) -> IngestionEntry:
    if (ingestion_id is None) == (not last):
        raise RememUsageError("undo takes an ingestion id or last=True (remem ingest undo --id ID | --last)")
    if ingestion_id is not None:
        return get_ingestion(memory, ingestion_id)
    live = [e for e in list_ingestions(memory) if e.state != "undone"]
    if not live:
        raise NotFoundError("there is no ingestion left to undo; `remem ingest list` shows them all")
    undoing = [e for e in live if e.state == "undoing"]
    return undoing[-1] if undoing else live[-1]


def _report(entry: IngestionEntry) -> UndoReport:
    totals = entry.undo.get("totals", {})
    return UndoReport(
        entry.id, runs=int(entry.undo.get("runs", 0)), **{k: int(totals.get(k, 0)) for k in _COUNTS}
    )


def _commit(
    store: BaseStore, entry: IngestionEntry, step: str, ops: list[PutOp], counts: Mapping[str, int]
) -> None:
    """The step's writes and its mark in the entry, in one batch: a step is done exactly when it commits."""
    undo = entry.undo
    undo["done"] = [*undo.get("done", []), step]
    totals = undo.setdefault("totals", {})
    for k, n in counts.items():
        totals[k] = int(totals.get(k, 0)) + int(n)
    store.batch([*ops, _put_entry(entry)])
    if _on_step is not None:
        _on_step(step)


def undo_ingestion(
    memory: Memory, ingestion_id: str | None = None, *, last: bool = False, queue: JobQueue | None = None
) -> UndoReport:
    """Remove what one ingestion added (see the module's docstring); finishes an undo a crash left open.
    Undoing an ingestion already undone changes nothing and reports its totals. ``queue``: where the summary
    refreshes of the threads it kept are queued (their stale summaries rebuilt by a worker, not at the
    next card)."""
    store = _store(memory)
    entry = _pick(memory, ingestion_id, last)
    if entry.state == "undone":
        return _report(entry)
    with thread_lease(
        store_lease_target(store),
        f"_remem ingestion {entry.id}",
        scope="memory",
        timeout=memory.thread_lease_timeout,
    ):
        entry = get_ingestion(memory, entry.id)  # as the last run left it
        if entry.state == "undone":
            return _report(entry)
        entry.state = "undoing"
        entry.undo["runs"] = int(entry.undo.get("runs", 0)) + 1
        entry.undo.setdefault("removed", {})
        entry.undo.setdefault("thread_users", {})
        store.batch([_put_entry(entry)])
        for thread_id in sorted(entry.threads):
            if f"thread:{thread_id}" not in entry.undo.get("done", []):
                _undo_thread(memory, entry, thread_id)
        users = set(entry.users) | {u for u in entry.undo["thread_users"].values() if isinstance(u, str)}
        for user_id in sorted(users):
            if f"user:{user_id}" not in entry.undo.get("done", []):
                _undo_user(store, entry, user_id)
        entry.state = "undone"
        entry.finished_at = now_iso()
        _commit(store, entry, "closed", [], {})
    kept = [t for t in entry.threads if store.get(thread_meta(t), THREAD_META_KEY) is not None]
    _refresh(queue, dict.fromkeys(kept))
    return _report(entry)


def _get(store: BaseStore, ops: list[GetOp]) -> list[Item | None]:
    return cast("list[Item | None]", store.batch(ops)) if ops else []


def _order(store: BaseStore, thread_id: str, count: int) -> list[str]:
    chunks = (count + ORDER_CHUNK - 1) // ORDER_CHUNK
    items = _get(store, [GetOp(thread_order(thread_id), chunk_key(n)) for n in range(chunks)])
    ids: list[str] = []
    for item in items:
        ids.extend(item.value["ids"] if item is not None else [])
    return ids[:count]


def _undo_thread(memory: Memory, entry: IngestionEntry, thread_id: str) -> None:
    store = memory.store
    with thread_lease(
        store_lease_target(store), thread_id, scope="memory", timeout=memory.thread_lease_timeout
    ) as lease:
        meta = store.get(thread_meta(thread_id), THREAD_META_KEY)
        info = ThreadInfo.from_value(meta.value) if meta is not None else None
        values = {item.key: item.value for item in _all(store, thread_messages(thread_id))}
        tagged = sorted(
            k for k, v in values.items() if (v.get("metadata") or {}).get(MESSAGE_TAG) == entry.id
        )
        ops: list[PutOp] = [PutOp(thread_messages(thread_id), key, None) for key in tagged]
        counts = {"messages": len(tagged)}
        entry.undo["removed"][thread_id] = tagged
        entry.undo["thread_users"][thread_id] = info.user_id if info is not None else None
        if info is not None and tagged:
            ops += _thread_rewrites(memory, entry, thread_id, info, values, set(tagged), counts)
        lease.verify()
        _commit(store, entry, f"thread:{thread_id}", ops, counts)


def _thread_rewrites(
    memory: Memory,
    entry: IngestionEntry,
    thread_id: str,
    info: ThreadInfo,
    values: Mapping[str, Mapping[str, Any]],
    removed: set[str],
    counts: dict[str, int],
) -> list[PutOp]:
    """The thread's order, counts, summaries and extraction watermark without the ``removed`` messages."""
    store = memory.store
    order = _order(store, thread_id, info.message_count)
    kept = [i for i in order if i not in removed]
    first = next((n for n, i in enumerate(order) if i in removed), len(order))
    revisions = _get(
        store, [GetOp(thread_summaries(thread_id), chunk_key(n)) for n in range(1, info.summary_revision + 1)]
    )
    ops: list[PutOp] = []
    chunks = max((len(order) + ORDER_CHUNK - 1) // ORDER_CHUNK, 1)
    if entry.threads.get(thread_id) and not kept and len(values) == len(removed):
        # created by this ingestion, and nothing else was said there: the thread goes whole
        ops += [PutOp(thread_order(thread_id), chunk_key(n), None) for n in range(chunks)]
        ops += [PutOp(thread_summaries(thread_id), r.key, None) for r in revisions if r is not None]
        ops.append(PutOp(thread_meta(thread_id), THREAD_META_KEY, None))
        ops.append(PutOp(extraction_state(thread_id), EXTRACTION_STATE_KEY, None))
        counts["threads_removed"] = 1
        return ops
    fields = list(memory._message_fields)
    for seq in range(first, len(kept)):  # the messages after the first removed one move up
        value = values.get(kept[seq])
        if value is not None and value.get("seq") != seq:
            ops.append(PutOp(thread_messages(thread_id), kept[seq], {**value, "seq": seq}, index=fields))
    for n in range(first // ORDER_CHUNK, chunks):
        ids = kept[n * ORDER_CHUNK : (n + 1) * ORDER_CHUNK]
        ops.append(PutOp(thread_order(thread_id), chunk_key(n), {"ids": ids} if ids else None, index=False))
    last_user = max(
        (n for n, i in enumerate(kept) if (values.get(i) or {}).get("role") == "user"), default=-1
    )
    new_info = dataclasses.replace(info, message_count=len(kept), last_user_seq=last_user)
    ops.append(PutOp(thread_meta(thread_id), THREAD_META_KEY, new_info.to_value(), index=False))
    stale = 0
    for item in revisions:
        if (
            item is not None
            and int(item.value.get("covered_count", 0)) > first
            and not item.value.get("stale")
        ):
            reason = f"ingestion {entry.id} was undone"
            ops.append(
                PutOp(thread_summaries(thread_id), item.key, {**item.value, "stale": reason}, index=False)
            )
            stale += 1
    counts["summaries_stale"] = stale
    state = store.get(extraction_state(thread_id), EXTRACTION_STATE_KEY)
    if state is not None and state.value.get("watermark") in removed:
        mark = kept[first - 1] if first > 0 else None
        ops.append(
            PutOp(
                extraction_state(thread_id),
                EXTRACTION_STATE_KEY,
                {**state.value, "watermark": mark},
                index=False,
            )
        )
    return ops


def _undo_user(store: BaseStore, entry: IngestionEntry, user_id: str) -> None:
    removed: dict[str, list[str]] = entry.undo.get("removed", {})
    everywhere = {i for ids in removed.values() for i in ids}
    items = _all(store, user_memories(user_id))

    def derived(value: Mapping[str, Any]) -> bool:
        if value.get(MEMORY_TAG) == entry.id:
            return True
        sources = value.get("source_message_ids") or []
        thread = value.get("thread_id")
        pool = set(removed.get(thread, ())) if isinstance(thread, str) and thread else everywhere
        return any(s in pool for s in sources)

    gone = {item.key for item in items if derived(item.value)}
    ops: list[PutOp] = [PutOp(user_memories(user_id), key, None) for key in sorted(gone)]
    restored = 0
    for item in items:
        if item.key not in gone and item.value.get("superseded_by") in gone:
            value = {**item.value, "valid": True, "status": "active", "superseded_by": None}
            value.update(invalidated_at=None, invalid_reason=None)
            ops.append(PutOp(user_memories(user_id), item.key, value))
            restored += 1
    _commit(store, entry, f"user:{user_id}", ops, {"memories": len(gone), "memories_restored": restored})
