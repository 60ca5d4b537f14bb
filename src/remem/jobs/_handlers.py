"""The built-in jobs: memory extraction, summary refresh and re-indexing, run against one database."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from remem.errors import NotFoundError
from remem.extraction.tools import EXTRACTION_JOB, run_extraction_job
from remem.jobs._queue import Job, JobQueue
from remem.jobs._worker import Handler

if TYPE_CHECKING:
    from remem.config import Settings
    from remem.memory import Memory

__all__ = [
    "EMBED_JOB",
    "EXTRACTION_JOB",
    "REINDEX_JOB",
    "SUMMARY_JOB",
    "BuiltinHandlers",
    "drop_jobs_of_messages",
    "enqueue_embedding",
    "enqueue_reindex",
    "enqueue_summary_refresh",
]

SUMMARY_JOB = "summary"  # extend a thread's summary from its coverage watermark
EMBED_JOB = "embed"  # embed and index new turns stored unindexed (embed_turns = "queue")
REINDEX_JOB = "reindex"  # embed and index a thread's messages again (a new embedder, turns stored unindexed)
_REINDEX_BATCH = 200


def enqueue_summary_refresh(queue: JobQueue, thread_id: str, *, user_id: str | None = None) -> str:
    """Queue the refresh of ``thread_id``'s summary (one live job per thread; they run in order)."""
    return queue.enqueue(
        SUMMARY_JOB,
        {"thread_id": thread_id},
        serial_key=f"{SUMMARY_JOB}:{thread_id}",
        user_id=user_id,
        thread_id=thread_id,
    )


def enqueue_embedding(
    queue: JobQueue, thread_id: str, message_ids: Sequence[str], *, user_id: str | None = None
) -> str | None:
    """Queue the embedding and indexing of ``message_ids`` of ``thread_id`` (stored unindexed); returns the
    job's id (None: no message). The same turn queued again adds nothing; a thread's jobs run in order."""
    if not message_ids:
        return None
    return queue.enqueue(
        EMBED_JOB,
        {"thread_id": thread_id, "message_ids": list(message_ids)},
        input_key=f"{EMBED_JOB}:{thread_id}:{message_ids[-1]}",
        serial_key=f"{SUMMARY_JOB}:{thread_id}",
        user_id=user_id,
        thread_id=thread_id,
    )


def enqueue_reindex(queue: JobQueue, thread_id: str, *, user_id: str | None = None) -> str:
    """Queue the re-indexing of every message of ``thread_id`` with the worker's embedder (one live job per
    thread): for turns that were stored without their vectors (a text whose vector is stored is not
    embedded again: switching embedders is ``store.reembed``, ``remem store reembed``)."""
    return queue.enqueue(
        REINDEX_JOB,
        {"thread_id": thread_id},
        serial_key=f"{SUMMARY_JOB}:{thread_id}",  # in order with the thread's summary refreshes
        user_id=user_id,
        thread_id=thread_id,
    )


def drop_jobs_of_messages(queue: JobQueue, removed: Mapping[str, Collection[str]]) -> int:
    """Take out of the queue the work on messages that are gone (an ingestion undone): per thread of
    ``removed`` (thread id -> the ids removed from it), every waiting summary refresh (the undo queues a
    fresh one for a thread it keeps), and the waiting extraction jobs that hold a removed message (one that
    holds other messages too keeps those). Returns how many jobs were removed or cut."""

    def rewrite(kind: str, payload: Any) -> Any:
        if kind == SUMMARY_JOB:
            return None
        gone = set(removed.get(str(payload.get("thread_id")), ()))
        messages = list(payload.get("messages") or [])
        kept = [m for m in messages if (m.get("data") or {}).get("id") not in gone]
        if len(kept) == len(messages):
            return payload
        return {**payload, "messages": kept} if kept else None

    return queue.drop_waiting(sorted(removed), [EXTRACTION_JOB, SUMMARY_JOB], rewrite)


class BuiltinHandlers:
    """The handlers of the built-in kinds, on the memory at ``url`` (opened at the first job, closed by
    :meth:`close`). The chat model (for extraction and summaries) and the embedder come from ``settings``
    (default: :func:`remem.load_settings`, read again after :meth:`reload`); model calls are recorded in
    the database's usage ledger."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings
        self._memory: Memory | None = None
        self._extractor: Any = None
        self._lock = threading.Lock()
        self._retired: list[Memory] = []  # opened before a reload; a job may still be using one
        self.reloads = 0
        self._opened_at = 0

    def reload(self) -> None:
        """Read the configuration again at the next job (``remem worker`` on SIGHUP): a model key rotated in
        ``remem.toml`` (or the file ``REMEM_CONFIG`` names) is used from then on, with no restart. Safe to
        call from a signal handler: it only marks the parts to rebuild; jobs already running finish with the
        parts they started with."""
        self.reloads += 1

    def _open(self) -> tuple[Memory, Any]:
        with self._lock:
            if self._memory is not None and self._opened_at != self.reloads and self.settings is None:
                self._retired.append(self._memory)
                self._memory = None
            if self._memory is None:
                self._opened_at = self.reloads
                from remem.config import load_settings
                from remem.extraction import MemoryExtractor
                from remem.memory import Memory
                from remem.models import chat_model_from_settings

                settings = self.settings or load_settings()
                memory = Memory.from_url(self.url, settings=settings)
                self._extractor = MemoryExtractor(
                    memory.store, model=chat_model_from_settings(settings), meter=memory.meter
                )
                self._memory = memory
            return self._memory, self._extractor

    def extraction(self, job: Job) -> None:
        _, extractor = self._open()
        run_extraction_job(extractor, job.payload, job_id=job.id)

    def summary(self, job: Job) -> None:
        memory, _ = self._open()
        try:
            thread = memory.get_thread(str(job.payload["thread_id"]))
        except NotFoundError:
            return  # the thread is gone (erased): nothing to refresh
        thread.get_summary()

    def reindex(self, job: Job) -> None:
        """Put each message of the thread again with the memory's index fields: the store embeds and indexes
        it anew (the same value: running it twice does no harm)."""
        memory, _ = self._open()
        thread_id = str(job.payload["thread_id"])
        try:
            messages = memory.get_thread(thread_id).messages()
        except NotFoundError:
            return  # the thread is gone (erased, or an undone ingestion): nothing to index
        _index(memory, thread_id, [m.id for m in messages])

    def embed(self, job: Job) -> None:
        """Embed and index the new turns the job names (stored unindexed, ``embed_turns = "queue"``), as
        :meth:`reindex` does a whole thread; a message gone meanwhile (erased, undone) is skipped."""
        memory, _ = self._open()
        _index(memory, str(job.payload["thread_id"]), [str(k) for k in job.payload["message_ids"]])

    def as_mapping(self) -> dict[str, Handler]:
        return {
            EXTRACTION_JOB: self.extraction,
            SUMMARY_JOB: self.summary,
            REINDEX_JOB: self.reindex,
            EMBED_JOB: self.embed,
        }

    def close(self) -> None:
        with self._lock:
            for memory in [*self._retired, *([self._memory] if self._memory is not None else [])]:
                memory.close()
            self._retired.clear()
            self._memory = None


def _index(memory: Memory, thread_id: str, keys: Sequence[str]) -> None:
    """Put the messages ``keys`` of the thread again, same values, with the memory's index fields: the
    store embeds and indexes what it has no vector of yet (running it twice does no harm)."""
    from langgraph.store.base import PutOp

    from remem.layout import thread_messages

    fields = list(memory._message_fields)
    for start in range(0, len(keys), _REINDEX_BATCH):
        chunk = keys[start : start + _REINDEX_BATCH]
        items = [memory.store.get(thread_messages(thread_id), key) for key in chunk]
        memory.store.batch(
            [PutOp(thread_messages(thread_id), i.key, i.value, index=fields) for i in items if i is not None]
        )
