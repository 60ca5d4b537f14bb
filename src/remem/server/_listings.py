"""Reading the list of threads from their listings (:func:`remem.layout.thread_listing`), for ``/v1``, MCP,
the tenant erasure and the inspector alike.

A thread is a thread when its metadata item exists (its namespace is listed); what the list shows of it
is its listing, read for many threads at once. Threads written before listings were kept have none: each
of those is read alone (its metadata and last message), the one read here that grows with the threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from remem import layout
from remem.errors import NotFoundError, RememUsageError
from remem.memory import Memory, ThreadInfo

__all__ = ["all_listings", "listings_of", "thread_id_page", "unlisted_info"]


def thread_id_page(memory: Memory, limit: int, offset: int) -> list[str]:
    """One page of the store's thread ids (those with metadata), in the store's order of namespaces:
    one listing of namespaces."""
    from langgraph.store.base import ListNamespacesOp, MatchCondition

    op = ListNamespacesOp(
        match_conditions=(
            MatchCondition("prefix", layout.threads_root()),
            MatchCondition("suffix", ("meta",)),
        ),
        max_depth=3,
        limit=limit,
        offset=offset,
    )
    spaces: Any = memory.store.batch([op])[0]
    return [layout.unescape_label(ns[1]) for ns in spaces if len(ns) == 3]


def _info(value: Any) -> ThreadInfo | None:
    return ThreadInfo.from_value(value) if isinstance(value, dict) and "thread_id" in value else None


def listings_of(memory: Memory, thread_ids: Iterable[str]) -> dict[str, ThreadInfo]:
    """The listings these threads have (thread id -> its metadata as listed): one store batch of gets,
    which the SQL stores answer in a few statements."""
    from langgraph.store.base import GetOp

    ids = list(dict.fromkeys(thread_ids))
    if not ids:
        return {}
    items: Any = memory.store.batch([GetOp(layout.thread_listing(t), layout.THREAD_META_KEY) for t in ids])
    found = {}
    for thread_id, item in zip(ids, items, strict=True):
        info = None if item is None else _info(item.value)
        if info is not None:
            found[thread_id] = info
    return found


def all_listings(memory: Memory, most: int, page: int = 1000) -> Iterator[ThreadInfo]:
    """Every listing of the store (up to ``most``, in no set order): a search per ``page`` threads."""
    offset = 0
    while offset < most:
        found = memory.store.search(layout.thread_listings_root(), limit=page, offset=offset)
        for item in found:
            info = _info(item.value) if item.key == layout.THREAD_META_KEY else None
            if info is not None:
                yield info
        if len(found) < page:
            return
        offset += page


def unlisted_info(memory: Memory, thread_id: str) -> ThreadInfo | None:
    """A thread written before listings were kept, read alone: its metadata with its last message's time
    as its last activity (None when it is gone meanwhile)."""
    try:
        thread = memory.get_thread(thread_id)
        info = thread.info()
        last = thread.messages(last=1)
    except (NotFoundError, RememUsageError):
        return None
    return dataclasses.replace(info, last_activity=last[-1].timestamp if last else "")
