"""Undoing an ingestion, one journaled step at a time (see :mod:`remem.ingestion`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from remem._clock import now_iso
from remem._lease import ThreadLease, thread_lease
from remem._statements import Program
from remem.errors import NotFoundError, RememUsageError
from remem.ingestion._import import head_of
from remem.ingestion._journal import (
    _COUNTS,
    MEMORY_TAG,
    MESSAGE_TAG,
    IngestionEntry,
    UndoReport,
    _all,
    _put_entry,
    _store,
    get_ingestion,
    list_ingestions,
)
from remem.ingestion._load import refresh_summaries
from remem.jobs import JobQueue, drop_jobs_of_messages
from remem.layout import (
    EXTRACTION_STATE_KEY,
    INGESTION_INVALIDATED_KEY,
    THREAD_META_KEY,
    chunk_key,
    extraction_state,
    thread_messages,
    thread_meta,
    thread_order,
    thread_summaries,
    user_memories,
)
from remem.memory import Memory
from remem.memory._plans import FOLD_KEY, drop_info, save_info
from remem.memory._records import ORDER_CHUNK, ThreadInfo
from remem.store._targets import fenced_batch, store_lease_target

__all__ = ["undo_ingestion"]


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


def _all_fenced(leases: Sequence[ThreadLease], dialect: Any) -> Program[None]:
    for lease in leases:
        yield from lease.fenced(dialect)


def _commit(
    store: BaseStore,
    entry: IngestionEntry,
    step: str,
    ops: list[PutOp],
    counts: Mapping[str, int],
    leases: Sequence[ThreadLease] = (),
) -> None:
    """The step's writes and its mark in the entry, in one batch: a step is done exactly when it commits
    (only while the fencing token of each of ``leases`` holds: :func:`fenced_batch`)."""
    undo = entry.undo
    undo["done"] = [*undo.get("done", []), step]
    totals = undo.setdefault("totals", {})
    for k, n in counts.items():
        totals[k] = int(totals.get(k, 0)) + int(n)
    fenced_batch(store, [*ops, _put_entry(entry)], functools.partial(_all_fenced, leases))
    from remem import ingestion  # the package holds the crash tests' seam, ``remem.ingestion._on_step``

    if ingestion._on_step is not None:
        ingestion._on_step(step)


def undo_ingestion(
    memory: Memory,
    ingestion_id: str | None = None,
    *,
    last: bool = False,
    queue: JobQueue | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> UndoReport:
    """Remove what one ingestion added (see the module's docstring); finishes an undo a crash left open.
    Undoing an ingestion already undone changes nothing and reports its totals. ``queue``: where the summary
    refreshes of the threads it kept are queued (their stale summaries rebuilt by a worker, not at the
    next card). ``checkpointer``: remem's saver on the same database, needed to undo an import (its
    threads' checkpoints are deleted)."""
    store = _store(memory)
    entry = _pick(memory, ingestion_id, last)
    if entry.state == "undone":
        return _report(entry)
    _check_imported(entry, checkpointer)
    with thread_lease(
        store_lease_target(store),
        f"_remem ingestion {entry.id}",
        scope="memory",
        timeout=memory.thread_lease_timeout,
    ) as held:
        entry = get_ingestion(memory, entry.id)  # as the last run left it
        if entry.state == "undone":
            return _report(entry)
        entry.state = "undoing"
        entry.undo["runs"] = int(entry.undo.get("runs", 0)) + 1
        entry.undo.setdefault("removed", {})
        entry.undo.setdefault("thread_users", {})
        fenced_batch(store, [_put_entry(entry)], held.fenced)
        if queue is not None and "jobs" not in entry.undo.get("done", []):
            _undo_jobs(memory, entry, queue, held)
        for thread_id in sorted(entry.threads):
            if f"thread:{thread_id}" not in entry.undo.get("done", []):
                _undo_thread(memory, entry, thread_id, checkpointer, held)
        users = set(entry.users) | {u for u in entry.undo["thread_users"].values() if isinstance(u, str)}
        for user_id in sorted(users):
            if f"user:{user_id}" not in entry.undo.get("done", []):
                _undo_user(store, entry, user_id, held)
        entry.state = "undone"
        entry.finished_at = now_iso()
        _commit(store, entry, "closed", [], {}, [held])
    kept = [t for t in entry.threads if store.get(thread_meta(t), THREAD_META_KEY) is not None]
    refresh_summaries(queue, dict.fromkeys(kept))
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


def _tagged(entry: IngestionEntry, values: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The keys of the messages among ``values`` that this ingestion added."""
    return sorted(k for k, v in values.items() if (v.get("metadata") or {}).get(MESSAGE_TAG) == entry.id)


def _undo_jobs(memory: Memory, entry: IngestionEntry, queue: JobQueue, held: ThreadLease) -> None:
    """First step: the waiting jobs on what goes (its threads' summary refreshes, the extraction of its
    messages) leave the queue, so no worker starts them while the undo runs. Dropping them again changes
    nothing, so a run killed before this step's mark redoes it (and counts none of them twice)."""
    removed: dict[str, list[str]] = {}
    for thread_id in sorted(entry.threads):
        done = entry.undo.get("removed", {}).get(thread_id)
        if done is None:
            values = {i.key: i.value for i in _all(memory.store, thread_messages(thread_id))}
            done = _tagged(entry, values)
        removed[thread_id] = list(done)
    dropped = drop_jobs_of_messages(queue, removed)
    _commit(memory.store, entry, "jobs", [], {"jobs": dropped}, [held])


def _check_imported(entry: IngestionEntry, checkpointer: BaseCheckpointSaver[Any] | None) -> None:
    """An import's undo deletes the checkpoints of the threads it created: it needs the saver, and refuses
    (before changing anything) when one of them was continued after the import."""
    if not entry.imported:
        return
    if checkpointer is None:
        raise RememUsageError(
            f"ingestion {entry.id} imported checkpoints: undo it with the saver too (undo_ingestion(..., "
            "checkpointer=saver)), or with `remem ingest undo`"
        )
    done = entry.undo.get("done", [])
    continued = sorted(
        thread_id
        for thread_id, head in entry.imported.items()
        if head
        and f"thread:{thread_id}" not in done
        and (now := head_of(checkpointer, thread_id)) is not None
        and now.config["configurable"]["checkpoint_id"] != head
    )
    if continued:
        raise RememUsageError(
            f"thread(s) {', '.join(repr(t) for t in continued)} of ingestion {entry.id} went on after the "
            "import; undoing it would cut their history. Erase them first (`remem forget --thread T`), "
            "then undo again"
        )


def _undo_thread(
    memory: Memory,
    entry: IngestionEntry,
    thread_id: str,
    checkpointer: BaseCheckpointSaver[Any] | None,
    held: ThreadLease,
) -> None:
    store = memory.store
    with thread_lease(
        store_lease_target(store), thread_id, scope="memory", timeout=memory.thread_lease_timeout
    ) as lease:
        meta = store.get(thread_meta(thread_id), THREAD_META_KEY)
        info = ThreadInfo.from_value(meta.value) if meta is not None else None
        values = {item.key: item.value for item in _all(store, thread_messages(thread_id))}
        tagged = _tagged(entry, values)
        ops: list[PutOp] = [PutOp(thread_messages(thread_id), key, None) for key in tagged]
        counts = {"messages": len(tagged)}
        entry.undo["removed"][thread_id] = tagged
        entry.undo["thread_users"][thread_id] = info.user_id if info is not None else None
        if info is not None and tagged:
            ops += _thread_rewrites(memory, entry, thread_id, info, values, set(tagged), counts)
        if thread_id in entry.watermarks and not counts.get("threads_removed"):
            # an extraction run: its watermark goes back to where the run found it
            ops = [op for op in ops if op.namespace != extraction_state(thread_id)]
            state = store.get(extraction_state(thread_id), EXTRACTION_STATE_KEY)
            if state is not None:
                value = {**state.value, "watermark": entry.watermarks[thread_id]}
                ops.append(PutOp(extraction_state(thread_id), EXTRACTION_STATE_KEY, value, index=False))
        if thread_id in entry.imported and checkpointer is not None:
            checkpointer.delete_thread(thread_id)  # again after a crash: nothing left to delete
            counts["checkpoint_threads"] = 1
        lease.verify()
        _commit(store, entry, f"thread:{thread_id}", ops, counts, [held, lease])


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
        ops.append(PutOp(thread_summaries(thread_id), FOLD_KEY, None))
        ops += drop_info(thread_id)
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
    latest = str((values.get(kept[-1]) or {}).get("timestamp", "")) if kept else ""
    new_info = dataclasses.replace(
        info, message_count=len(kept), last_user_seq=last_user, last_activity=latest
    )
    ops += save_info(thread_id, new_info)
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
    fold = store.get(thread_summaries(thread_id), FOLD_KEY)
    if fold is not None and int(fold.value.get("covered", 0)) > first:
        # It summarises removed messages: the next appends fold the thread again, from the start.
        ops.append(PutOp(thread_summaries(thread_id), FOLD_KEY, None))
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


def _undo_user(store: BaseStore, entry: IngestionEntry, user_id: str, held: ThreadLease) -> None:
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
        if item.key in gone:
            continue
        if item.value.get("superseded_by") in gone or item.value.get(INGESTION_INVALIDATED_KEY) == entry.id:
            value = {**item.value, "valid": True, "status": "active", "superseded_by": None}
            value.update(invalidated_at=None, invalid_reason=None)
            if value.pop(INGESTION_INVALIDATED_KEY, None) is not None:
                value.pop("evidence", None)
            ops.append(PutOp(user_memories(user_id), item.key, value))
            restored += 1
    counts = {"memories": len(gone), "memories_restored": restored}
    _commit(store, entry, f"user:{user_id}", ops, counts, [held])
