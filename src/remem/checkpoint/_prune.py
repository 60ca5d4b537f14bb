"""The checkpointer's deletions, as programs of statements: deleting and copying threads, pruning
checkpoints (with the items and lists no remaining checkpoint uses), and picking what a prune deletes."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import ormsgpack

from remem._statements import Program, Statement
from remem.checkpoint import _codec as codec
from remem.checkpoint import _ids as ids
from remem.checkpoint import _sql as sql
from remem.checkpoint._ops import Context, Tx
from remem.errors import RememUsageError


def _lock(ctx: Context, thread_id: str) -> Program[tuple[Any, ...] | None]:
    rows = yield ctx.q(ctx.dialect.thread_lock(), (thread_id,))
    return rows[0] if rows else None


def _delete_rows(ctx: Context, tid: int) -> Iterable[Statement]:
    for table in sql.TABLES:
        yield ctx.q(f"DELETE FROM {table} WHERE tid = ?", (tid,), "none")
    yield ctx.q(sql.DELETE_THREAD_ROW, (tid,), "none")


def delete_threads(ctx: Context, tx: Tx, thread_ids: Sequence[str]) -> Program[None]:
    for thread_id in sorted(set(thread_ids)):
        row = yield from _lock(ctx, thread_id)
        if row is not None:
            tid: int = row[0]
            yield from _delete_rows(ctx, tid)
            tx.after_commit.append(functools.partial(ctx.cache.forget, tid))


def copy_thread(ctx: Context, source: str, target: str) -> Program[None]:
    src = yield from _lock(ctx, source)
    if src is None or source == target:
        return
    dst = yield from _lock(ctx, target)
    if dst is not None:
        ((count,),) = yield ctx.q(sql.COUNT_CHECKPOINTS, (dst[0],))
        if count:
            raise RememUsageError(
                f"cannot copy thread {source!r} into {target!r}: the target already has checkpoints; "
                "delete it first or pick a new thread id"
            )
        yield from _delete_rows(ctx, dst[0])
    now = time.time()
    ((new_tid,),) = yield ctx.q(sql.INSERT_THREAD_COPY, (target, src[2], src[3], now, now))
    for statement in sql.COPY_STATEMENTS:
        yield ctx.q(statement, (new_tid, src[0]), "none")


def _created(ts: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


CheckpointInfo = tuple[str, str, str | None, str, int]
"""(namespace, checkpoint id, run id, creation timestamp, seq) of one stored checkpoint; ``seq`` is its
place in the order the namespace's checkpoints were written (the head is the highest)."""
Picker = Callable[[list[CheckpointInfo]], set[tuple[str, str]]]
"""Picks the (namespace, checkpoint id) of the checkpoints a prune deletes."""


def prune_thread(ctx: Context, tx: Tx, thread_id: str, doomed: Picker) -> Program[int]:
    """Deletes the checkpoints ``doomed`` picks (from the :data:`CheckpointInfo` of every checkpoint of the
    thread), their writes, and then every item and list no remaining checkpoint or write uses."""
    row = yield from _lock(ctx, thread_id)
    if row is None:
        return 0
    tid = row[0]
    raw = yield ctx.q(sql.SELECT_THREAD_CHECKPOINTS, (tid,))
    decoded = {
        (ns, ids.shown(cid)): (ids.maybe_shown(parent_id), run_id, codec.decode_body(bytes(body)), seq or 0)
        for ns, cid, parent_id, run_id, body, seq in raw
    }
    gone = doomed([(ns, cid, v[1], v[2].created(cid), v[3]) for (ns, cid), v in decoded.items()])
    if not gone:
        return 0
    keys = [(ns, ids.stored(cid)) for ns, cid in sorted(gone)]
    yield ctx.q(sql.DELETE_CHECKPOINT_WRITES, [(tid, ns, cid) for ns, cid in keys], "many")
    yield ctx.q(sql.DELETE_CHECKPOINT, [(tid, ns, cid) for ns, cid in keys], "many")
    orphans = [
        (tid, ns, ids.stored(cid))
        for (ns, cid), v in decoded.items()
        if (ns, cid) not in gone and (ns, v[0]) in gone
    ]
    if orphans:
        yield ctx.q(sql.CLEAR_PARENT, orphans, "many")
    kept = [v[2] for key, v in decoded.items() if key not in gone]
    yield from _collect_garbage(ctx, tid, kept)
    tx.after_commit.append(lambda: ctx.cache.forget(tid))
    return len(gone)


def _collect_garbage(ctx: Context, tid: int, kept: list[codec.RawBody]) -> Program[None]:
    writes = yield ctx.q(sql.SELECT_THREAD_WRITES, (tid,))
    descs: list[Any] = [d for body in kept for d in body.descriptors.values()]
    descs.extend(n for body in kept for n in body.name_refs())
    descs.extend(ormsgpack.unpackb(bytes(w[2])) for w in writes)
    descs.extend(n for w in writes for n in (w[0], w[1]))
    list_rows = yield ctx.q(sql.SELECT_ALL_LISTS, (tid,))
    rows = {no: codec.decode_list_row(no, base, bytes(body)) for no, base, body in list_rows}
    memo: dict[int, list[int]] = {}

    def rebuild(no: int) -> list[int]:
        if no not in memo:
            r = rows[no]
            base = rebuild(r.base) if r.base is not None else []
            memo[no] = (
                codec.apply_list_delta(base, r.prefix, r.suffix, r.middle) if r.base is not None else r.middle
            )
        return memo[no]

    live_items: set[int] = set()
    live_lists: set[int] = set()
    for d in descs:
        if isinstance(d, list) and d[0] == 1:
            no: int | None = d[1]
            live_items.update(rebuild(d[1]))
            live_items.update(codec.decode_refs(d[2:]))
            while no is not None and no not in live_lists:
                live_lists.add(no)
                no = rows[no].base
        else:
            live_items.update(codec.refs_of_descriptor(d, {}))
    patched = yield ctx.q(ctx.dialect.patched_items(), (tid, codec.PATCHED_HEAD))
    live_items.update(
        base
        for no, head in patched
        if no in live_items and (base := codec.patch_base(bytes(head))) is not None
    )  # a live item's base is read with it
    all_items = yield ctx.q(sql.SELECT_ITEM_NOS, (tid,))
    dead_items = sorted({r[0] for r in all_items} - live_items)
    dead_lists = sorted(set(rows) - live_lists)
    for start in range(0, len(dead_items), 5000):
        chunk = ctx.dialect.list_param(dead_items[start : start + 5000])
        yield ctx.q(ctx.dialect.delete_in("remem_cp_items", "item_no"), (tid, chunk), "none")
    for start in range(0, len(dead_lists), 5000):
        chunk = ctx.dialect.list_param(dead_lists[start : start + 5000])
        yield ctx.q(ctx.dialect.delete_in("remem_cp_lists", "list_no"), (tid, chunk), "none")
    yield ctx.q(sql.BUMP_EPOCH, (tid,), "none")


def keep_latest(before: datetime | None) -> Picker:
    """Picks every checkpoint but the latest of each namespace (only those created before ``before``). The
    latest is the last written (highest ``seq``, the head ``get_tuple`` reads), not the highest id: an id
    carries its writer's clock, which may run ahead of the others'."""

    def pick(checkpoints: list[CheckpointInfo]) -> set[tuple[str, str]]:
        latest: dict[str, tuple[int, str]] = {}
        for ns, cid, _, _, seq in checkpoints:
            if (seq, cid) > latest.get(ns, (-1, "")):
                latest[ns] = (seq, cid)
        out = set()
        for ns, cid, _, ts, _ in checkpoints:
            if cid == latest[ns][1]:
                continue
            created = _created(ts)
            if before is None or (created is not None and created < before):
                out.add((ns, cid))
        return out

    return pick


def of_runs(run_ids: set[str]) -> Picker:
    def pick(checkpoints: list[CheckpointInfo]) -> set[tuple[str, str]]:
        return {(ns, cid) for ns, cid, run_id, _, _ in checkpoints if run_id in run_ids}

    return pick


def threads_of_runs(ctx: Context, run_ids: Sequence[str]) -> Program[list[str]]:
    rows = yield ctx.q(ctx.dialect.runs_in(), (ctx.dialect.list_param([str(r) for r in run_ids]),))
    return [r[1] for r in rows]


def idle_threads(ctx: Context, thread_ids: Sequence[str], before: datetime) -> Program[list[str]]:
    out = []
    for thread_id in thread_ids:
        rows = yield ctx.q(sql.FIND_THREAD, (thread_id,))
        if rows and rows[0][4] < before.timestamp():
            out.append(thread_id)
    return out
