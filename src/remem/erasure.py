"""Erasure across everything remem keeps in one database: long-term items and thread checkpoints.

``remem.store.forget`` erases items, vectors, keyword rows and queued work; this adds the checkpoints of
the threads concerned (a thread asked for by id, or every thread a user's erasure took whole), then
compacts a SQLite file again so the deleted bytes are gone from it too.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from remem._url import parse_database_url
from remem.checkpoint import checkpointer_from_url
from remem.errors import ConfigError
from remem.store import ForgetReport, forget, open_store

__all__ = ["ErasureReport", "erase"]


@dataclass
class ErasureReport:
    """What :func:`erase` removed: the store's report and the threads whose checkpoints went."""

    store: ForgetReport
    checkpoint_threads: list[str] = field(default_factory=list)

    def as_rows(self) -> list[tuple[str, str]]:
        threads = ", ".join(self.checkpoint_threads) or "none"
        return [*self.store.as_rows(), ("threads whose checkpoints were deleted", threads)]


def _threads_taken_whole(report: ForgetReport) -> list[str]:
    # A thread erased whole loses its metadata item ("threads", T, "meta").
    return sorted(
        {ns[1] for ns, _ in report.item_keys if len(ns) >= 3 and ns[0] == "threads" and ns[2] == "meta"}
    )


def erase(
    url: str, *, user_id: str | None = None, thread_id: str | None = None, namespace: str | None = None
) -> ErasureReport:
    """Erase a user's, a thread's or a namespace's data from the database at ``url``, checkpoints included."""
    # Check the URL before touching anything, so that an erasure is never done by halves.
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        raise ConfigError("memory:// keeps nothing between runs; name the database to erase from")
    with open_store(url) as store:
        report = forget(store, user_id=user_id, thread_id=thread_id, namespace=namespace)
    threads = [thread_id] if thread_id is not None else _threads_taken_whole(report) if user_id else []
    if not threads:
        return ErasureReport(store=report)
    with checkpointer_from_url(url) as saver:
        for thread in threads:
            saver.delete_thread(thread)
    if parsed.kind == "sqlite":
        # The store compacted before the checkpoints went; compact again so their bytes leave the file.
        conn = sqlite3.connect(parsed.target, isolation_level=None)
        try:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    return ErasureReport(store=report, checkpoint_threads=threads)
