"""Durable background jobs: a queue in the database, run by workers that may die at any moment.

    from remem.jobs import open_queue, run_workers, BuiltinHandlers
    queue = open_queue("sqlite:///app.db")                   # the same database as the threads
    node = extraction_node(MemoryExtractor(model=llm), queue=queue)   # a turn queues its extraction
    handlers = BuiltinHandlers("sqlite:///app.db")
    run_workers(queue, handlers.as_mapping(), concurrency=2)  # or: remem worker --db ... --concurrency 2
    pool = start_workers(queue, handlers.as_mapping())        # or in the background of the app; pool.stop()

Jobs live in one table (``remem_jobs``, set up through :mod:`remem._migrate`). What is guaranteed:

- **Nothing is dropped.** A job is a row until it is done; a failure queues it again after a backoff
  (:class:`Backoff`), and a job that fails ``max_attempts`` times is *parked* with its error, never
  deleted (``remem queue retry`` queues it again, ``remem queue park`` stops one by hand).
- **A dead worker's job is taken again.** A claim is a lease on the job, extended by a heartbeat while it
  runs; when the worker dies (even by SIGKILL) the lease expires by the database's clock and the next
  claim takes the job. On SQLite a claim is one ``UPDATE ... RETURNING`` in a ``BEGIN IMMEDIATE``
  transaction; on PostgreSQL, ``FOR UPDATE SKIP LOCKED`` in a transaction where claims take turns.
- **Running a job twice does no harm.** Only the claim's holder can mark it done, so it completes once;
  a handler may still run again after a crash, so handlers are idempotent: keyed by the job's id and
  its input (extraction: the thread's watermark, and memory ids derived from the job's id).
- **One live job per input.** ``input_key`` names what a job works on; queueing it again while a job
  with it is queued, running or done adds nothing. Jobs with one ``serial_key`` (a thread) run in order.
- **Erasure removes a user's jobs** (:func:`forget_jobs`, called by :func:`remem.erasure.erase`).

Kinds built in: ``extraction`` (:func:`remem.extraction.tools.enqueue_extraction`), ``summary``
(:func:`enqueue_summary_refresh`; an ingestion queues one per thread it wrote or undid) and ``reindex``
(:func:`enqueue_reindex`: a thread's messages embedded and indexed again), ``embed`` (:func:`enqueue_embedding`:
new turns stored unindexed, embedded and indexed by a worker, with ``embed_turns = "queue"``). Any other
kind runs with a handler you give a worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from remem import _lazy
from remem._url import parse_database_url

if TYPE_CHECKING:
    from remem.jobs._handlers import (
        EMBED_JOB,
        EXTRACTION_JOB,
        REINDEX_JOB,
        SUMMARY_JOB,
        BuiltinHandlers,
        drop_jobs_of_messages,
        enqueue_embedding,
        enqueue_reindex,
        enqueue_summary_refresh,
    )
    from remem.jobs._queue import DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, Job, JobQueue, QueueStatus, new_owner
    from remem.jobs._sql import forget_jobs
    from remem.jobs._worker import Backoff, Handler, Worker, WorkerPool, run_workers, start_workers

# Names are imported on first use: erasure needs only ``forget_jobs``, and the handlers load extraction
# (and with it LangChain's language models), which ``remem forget`` would otherwise pay for in every run.
_SOURCES: dict[str, tuple[str, ...]] = {
    "remem.jobs._handlers": (
        "EMBED_JOB",
        "EXTRACTION_JOB",
        "REINDEX_JOB",
        "SUMMARY_JOB",
        "BuiltinHandlers",
        "drop_jobs_of_messages",
        "enqueue_embedding",
        "enqueue_reindex",
        "enqueue_summary_refresh",
    ),
    "remem.jobs._queue": (
        "DEFAULT_LEASE",
        "DEFAULT_MAX_ATTEMPTS",
        "Job",
        "JobQueue",
        "QueueStatus",
        "new_owner",
    ),
    "remem.jobs._sql": ("forget_jobs",),
    "remem.jobs._worker": ("Backoff", "Handler", "Worker", "WorkerPool", "run_workers", "start_workers"),
}
__getattr__, __dir__ = _lazy.exports(__name__, _SOURCES, globals())

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_MAX_ATTEMPTS",
    "EMBED_JOB",
    "EXTRACTION_JOB",
    "REINDEX_JOB",
    "SUMMARY_JOB",
    "Backoff",
    "BuiltinHandlers",
    "Handler",
    "Job",
    "JobQueue",
    "QueueStatus",
    "Worker",
    "WorkerPool",
    "drop_jobs_of_messages",
    "enqueue_embedding",
    "enqueue_reindex",
    "enqueue_summary_refresh",
    "forget_jobs",
    "new_owner",
    "open_queue",
    "open_queue_read_only",
    "run_workers",
    "start_workers",
]


def open_queue(url: str | Path) -> JobQueue:
    """The queue in the database at ``url`` (its table set up); ``memory://`` keeps one in this process."""
    parsed = parse_database_url(url)
    queue: JobQueue | None
    if parsed.kind == "postgres":
        from remem.jobs.postgres import PostgresQueue

        queue = PostgresQueue.open(parsed.target)
    else:
        from remem.jobs.sqlite import SqliteQueue

        queue = SqliteQueue.open(":memory:" if parsed.kind == "memory" else parsed.sqlite_path)
    assert queue is not None
    return queue


def open_queue_read_only(url: str | Path) -> JobQueue | None:
    """The queue in the existing database at ``url``, or None when it holds none (nothing is created)."""
    parsed = parse_database_url(url)
    if parsed.kind == "postgres":
        from remem.jobs.postgres import PostgresQueue

        return PostgresQueue.open(parsed.target, read_only=True)
    if parsed.kind == "memory":
        return None
    from remem.jobs.sqlite import SqliteQueue

    return SqliteQueue.open(parsed.sqlite_path, read_only=True)
