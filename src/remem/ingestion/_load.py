"""Writing through an ingestion: each message and memory tagged with its id, in the same store batch."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langgraph.store.base import PutOp

from remem._clock import now_iso
from remem._lease import thread_lease
from remem.errors import RememUsageError
from remem.extraction._schema import Candidate, memory_value
from remem.ingestion._journal import (
    MEMORY_TAG,
    MESSAGE_TAG,
    IngestionEntry,
    _new_id,
    _put_entry,
    _store,
    _without,
)
from remem.jobs import JobQueue, enqueue_summary_refresh
from remem.layout import (
    EXTRACTION_STATE_KEY,
    THREAD_META_KEY,
    extraction_state,
    ingestions_root,
    thread_meta,
    user_memories,
)
from remem.memory import Memory
from remem.memory._records import StoredMessage, stored_message_from_input
from remem.store._targets import fenced_batch, store_lease_target

if TYPE_CHECKING:
    from remem.extraction import ExtractionResult, MemoryExtractor

__all__ = ["Ingestion", "begin_ingestion", "refresh_summaries"]


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
        ) as lease:
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
            fenced_batch(store, [_put_entry(self.entry)], lease.fenced)
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

    def extract(
        self,
        extractor: MemoryExtractor,
        messages: Sequence[BaseMessage] | None = None,
        *,
        thread_id: str,
        user_id: str | None = None,
    ) -> ExtractionResult:
        """Run ``extractor`` outside a turn as part of this ingestion, on ``messages`` (default: the memory
        thread's messages) past the thread's extraction watermark. The turns it indexes and the memories it
        adds carry this ingestion's id; the undo removes them, makes valid again the memories it superseded
        or contradicted, and moves the watermark back to where it was before (so extraction redoes them)."""
        store = self.memory.store
        if messages is None:
            thread = self.memory.get_thread(thread_id)
            messages = [m.to_langchain() for m in thread.messages()]
            user_id = user_id or thread.info().user_id
        user_id = user_id or thread_id
        if thread_id not in self.entry.watermarks:
            state = store.get(extraction_state(thread_id), EXTRACTION_STATE_KEY)
            self.entry.watermarks[thread_id] = None if state is None else state.value.get("watermark")
            self.entry.threads.setdefault(thread_id, False)
            if user_id not in self.entry.users:
                self.entry.users.append(user_id)
            self._save()  # named, with its watermark, before anything is written
        result = extractor.run(
            list(messages), user_id=user_id, thread_id=thread_id, store=store, ingestion=self.id
        )
        self._count("messages", result.indexed_turns)
        self._count("memories", len(result.added) + len(result.updated))
        return result

    def close(self) -> None:
        """Mark the ingestion done (a load that failed half way stays ``open``, and is undone the same way);
        with a ``queue``, a summary refresh of every thread it wrote to is queued for the workers."""
        if self.entry.state == "open":
            self.entry.state = "done"
            self.entry.finished_at = now_iso()
            self._save()
            refresh_summaries(self.queue, self.entry.threads)


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


def refresh_summaries(queue: JobQueue | None, threads: Mapping[str, Any]) -> None:
    if queue is not None:
        for thread_id in sorted(threads):
            enqueue_summary_refresh(queue, thread_id)
