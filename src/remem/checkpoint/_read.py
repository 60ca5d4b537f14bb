"""The checkpointer's reads, as programs of statements: one tuple (``get_tuple``, ``get_head``), a page
of ``list()``, the thread ids, and the marks a LangGraph run's loaded tuples carry back to ``put``."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, writes_sort_key

from remem._statements import Program
from remem.checkpoint import _codec as codec
from remem.checkpoint import _ids as ids
from remem.checkpoint import _snapshot
from remem.checkpoint import _sql as sql
from remem.checkpoint._cache import Head
from remem.checkpoint._ops import (
    FROM_HEAD,
    RUN_KEY,
    RUN_MARK,
    Context,
    Tx,
    load_lists,
    load_payloads,
    thread_id_of,
)


@dataclass
class _Row:
    thread_id: str
    tid: int
    ns: str
    checkpoint_id: str
    parent_id: str | None
    body: codec.RawBody
    metadata: dict[str, Any]
    epoch: int
    writes: list[tuple[int, str, int, int, Any]] = field(default_factory=list)
    """(task path, task id, channel, idx, value descriptor); path and channel are name item numbers."""


def _rows(ctx: Context, raw: Iterable[tuple[Any, ...]]) -> list[_Row]:
    out = []
    for thread_id, tid, ns, cid, parent_id, body, meta, epoch in raw:
        metadata = codec.decode_metadata(ctx.serde, bytes(meta), trusted_types=ctx.trusted_types)
        parent = None if parent_id is None else ids.shown(parent_id)
        out.append(
            _Row(thread_id, tid, ns, ids.shown(cid), parent, codec.decode_body(bytes(body)), metadata, epoch)
        )
    return out


def _attach_writes(group: list[_Row], found: Iterable[Sequence[Any]]) -> None:
    """Give each of ``group`` its rows of pending writes: (checkpoint, task, idx, channel, path, value)."""
    by_id = {r.checkpoint_id: r for r in group}
    for cid, task_id, idx, channel, task_path, packed in found:
        write = (task_path, ids.shown(task_id), channel, idx, ormsgpack.unpackb(bytes(packed)))
        by_id[ids.shown(cid)].writes.append(write)


def _list_lengths(ctx: Context, tid: int, wanted: set[int]) -> Program[dict[int, int]]:
    """Lengths of stored lists, from their own rows: a delta's length needs no base."""
    out: dict[int, int] = {}
    for no in wanted:
        hit = ctx.cache.list_refs(tid, no)
        if hit is not None:
            out[no] = len(hit[0])
    missing = sorted(wanted - out.keys())
    if missing:
        fetched = yield ctx.q(ctx.dialect.lists_in(), (tid, ctx.dialect.list_param(missing)))
        for no, base, body in fetched:
            row = codec.decode_list_row(no, base, bytes(body))
            out[no] = row.prefix + len(row.middle) + row.suffix
    return out


def _sized_names(ctx: Context, tid: int, rows: list[_Row], sized: frozenset[str]) -> Program[set[int]]:
    """The name item numbers, among ``rows``' channels, of the channels in ``sized``."""
    channels = set().union(*(r.body.descriptors for r in rows), *({w[2] for w in r.writes} for r in rows))
    held = yield from load_payloads(ctx, tid, channels)
    return {no for no in channels if str(ctx.serde.loads_typed(held[no])) in sized}


_UNREAD = object()
"""A pending write to a ``sized`` channel, left unread."""


def _is_list(desc: Any) -> bool:
    return isinstance(desc, list) and desc[0] in (0, 1)


def _materialize(
    ctx: Context,
    rows: list[_Row],
    shared: dict[int, dict[int, Any]] | None,
    sized: frozenset[str] = frozenset(),
    lengths: dict[str, dict[str, int]] | None = None,
    *,
    writes_read: bool = False,
    gone_is_stale: bool = False,
) -> Program[list[CheckpointTuple]]:
    """Reads the writes, lists and items of ``rows`` (checkpoints of one or more threads) into tuples.

    With ``shared``, each item is deserialized once and the object is shared by every tuple built with
    the same dict (``list()`` does this); without it every occurrence is deserialized on its own.

    A list value of a channel in ``sized`` is not read: the tuple holds an empty list in its place and
    ``lengths[checkpoint_id][channel]`` its length, so listing a long thread reads no message. Pending
    writes to those channels are not read either (an empty list stands for their value).

    ``writes_read``: the rows hold their writes already
    (:func:`_attach_writes`). ``gone_is_stale``: a stored value the rows name and no row holds is a
    :class:`~remem.errors.StaleCacheError` (a read outside a snapshot: a prune came between its statements).
    """
    by_thread: dict[tuple[int, str], list[_Row]] = {}
    for r in rows:
        by_thread.setdefault((r.tid, r.ns), []).append(r)
    for (tid, ns), group in by_thread.items() if not writes_read else ():
        wanted = [ids.stored(r.checkpoint_id) for r in group]
        found = yield ctx.q(ctx.dialect.writes_in(), (tid, ns, ctx.dialect.list_param(wanted)))
        _attach_writes(group, found)

    tids = {r.tid for r in rows}
    lists: dict[int, dict[int, tuple[int, ...]]] = {}
    payloads: dict[int, dict[int, tuple[str, bytes]]] = {}
    skipped: dict[int, set[int]] = {}
    sizes: dict[int, dict[int, int]] = {}
    for tid in tids:
        thread_rows = [r for r in rows if r.tid == tid]
        skip = skipped[tid] = (yield from _sized_names(ctx, tid, thread_rows, sized)) if sized else set()
        counted = {
            d[1]
            for r in thread_rows
            for ch, d in r.body.descriptors.items()
            if ch in skip and isinstance(d, list) and d[0] == 1
        }
        sizes[tid] = (yield from _list_lengths(ctx, tid, counted)) if counted else {}
        stored = {
            d[1]
            for r in thread_rows
            for ch, d in r.body.descriptors.items()
            if isinstance(d, list) and d[0] == 1 and ch not in skip
        }
        loaded = (yield from load_lists(ctx, tid, stored)) if stored else {}
        lists[tid] = plain = {no: refs_ for no, (refs_, _) in loaded.items()}
        refs: set[int] = set().union(
            *(plain[no] for no in stored)
        )  # each list once, however many rows use it
        for r in thread_rows:
            refs.update(r.body.name_refs())
            for ch, d in r.body.descriptors.items():
                if ch in skip and _is_list(d):
                    continue
                if isinstance(d, list) and d[0] == 1:
                    refs.update(codec.decode_refs(d[2:]))  # its row's items are in already
                else:
                    refs.update(codec.refs_of_descriptor(d, plain))
            for w in r.writes:
                refs.update((w[0], w[2]))
                if w[2] not in skip:
                    refs.update(codec.refs_of_descriptor(w[4], plain))
        known = shared.setdefault(tid, {}) if shared is not None else {}
        refs.difference_update(known)
        payloads[tid] = held = yield from load_payloads(ctx, tid, refs, gone_is_stale=gone_is_stale)
        if shared is not None and refs:
            order = sorted(refs)
            known.update(zip(order, codec.loads_many(ctx.serde, [held[n] for n in order]), strict=True))

    def name(tid: int, no: int) -> str:
        if shared is not None:
            return str(shared[tid][no])
        return str(ctx.serde.loads_typed(payloads[tid][no]))

    def value(tid: int, desc: Any) -> Any:
        if isinstance(desc, list) and desc[0] == 2:
            return _snapshot.of_stored({desc[i]: value(tid, desc[i + 1]) for i in range(1, len(desc), 2)})
        if shared is not None:
            objects = shared[tid]
            if isinstance(desc, int):
                return objects[desc]
            whole = desc[0] == 1 and len(desc) == 2
            refs = lists[tid][desc[1]] if whole else codec.refs_of_descriptor(desc, lists[tid])
            return [objects[n] for n in refs]
        if isinstance(desc, int):
            return ctx.serde.loads_typed(payloads[tid][desc])
        held = payloads[tid]
        return codec.loads_many(ctx.serde, [held[n] for n in codec.refs_of_descriptor(desc, lists[tid])])

    out = []
    for r in rows:
        names = {n: name(r.tid, n) for n in r.body.name_refs()}
        checkpoint, _ = codec.resolve_body(ctx.serde, r.checkpoint_id, r.body, names)
        skip = skipped[r.tid]
        values: dict[str, Any] = {}
        for no, d in r.body.descriptors.items():
            if no in skip and _is_list(d):
                size = sizes[r.tid][d[1]] + len(d) - 2 if d[0] == 1 else len(d) - 1
                if lengths is not None:
                    lengths.setdefault(r.checkpoint_id, {})[names[no]] = size
                values[names[no]] = []
            else:
                values[names[no]] = value(r.tid, d)
        checkpoint["channel_values"] = values
        named = [
            (name(r.tid, path), task_id, name(r.tid, ch), idx, _UNREAD if ch in skip else v)
            for path, task_id, ch, idx, v in r.writes
        ]
        ordered = sorted(named, key=lambda w: writes_sort_key(w[0], w[1], w[3]))
        config: RunnableConfig = {
            "configurable": {
                "thread_id": r.thread_id,
                "checkpoint_ns": r.ns,
                "checkpoint_id": r.checkpoint_id,
            }
        }
        parent: RunnableConfig | None = None
        if r.parent_id:
            parent = {
                "configurable": {
                    "thread_id": r.thread_id,
                    "checkpoint_ns": r.ns,
                    "checkpoint_id": r.parent_id,
                }
            }
        out.append(
            CheckpointTuple(
                config=config,
                checkpoint=checkpoint,  # type: ignore[arg-type]
                metadata=r.metadata,  # type: ignore[arg-type]
                parent_config=parent,
                pending_writes=[(w[1], w[2], [] if w[4] is _UNREAD else value(r.tid, w[4])) for w in ordered],
            )
        )
    return out


def get_tuple(ctx: Context, config: RunnableConfig, tx: Tx | None = None) -> Program[CheckpointTuple | None]:
    """The tuple ``config`` names (its latest without a checkpoint id). On PostgreSQL its row and pending
    writes are one statement, and a read outside a snapshot (``tx.snapshot`` False) whose values all come
    from the caches is one round trip."""
    found = yield from _get(ctx, config, tx)
    return found[1]


def _get(
    ctx: Context, config: RunnableConfig, tx: Tx | None
) -> Program[tuple[Stamp | None, CheckpointTuple | None]]:
    conf = config["configurable"]
    thread_id = thread_id_of(conf)
    ns = str(conf.get("checkpoint_ns", ""))
    checkpoint_id = conf.get("checkpoint_id")
    folded = ctx.dialect.name == "postgres"
    if checkpoint_id:
        text = sql.GET_CHECKPOINT_WITH_WRITES if folded else sql.GET_CHECKPOINT
        raw = yield ctx.q(text, (thread_id, ns, ids.stored(str(checkpoint_id))))
    else:
        raw = yield ctx.q(
            sql.GET_LATEST_WITH_WRITES if folded else sql.GET_LATEST_CHECKPOINT, (thread_id, ns)
        )
    if not raw:
        return None, None
    rows = _rows(ctx, [r[:8] for r in raw])
    if folded:
        cids, *columns = raw[0][8:]
        _attach_writes(rows, zip(cids or (), *(c or () for c in columns), strict=True))
    (tup,) = yield from _materialize(
        ctx, rows, None, writes_read=folded, gone_is_stale=tx is not None and not tx.snapshot
    )
    r = rows[0]
    ctx.cache.set_head(r.tid, r.ns, Head(r.checkpoint_id, r.epoch, r.body.versions, r.body.descriptors))
    return (r.checkpoint_id, r.epoch, len(r.writes)), tup


Stamp = tuple[Any, ...]
"""(checkpoint id, thread epoch, pending write count) of a thread's latest checkpoint: what tells whether
a tuple read before is still the one :func:`get_tuple` would read."""


def head_stamp(ctx: Context, config: RunnableConfig) -> Program[Stamp | None]:
    conf = config["configurable"]
    rows = yield ctx.q(sql.HEAD_STAMP, (thread_id_of(conf), str(conf.get("checkpoint_ns", ""))))
    return (ids.shown(rows[0][0]), *rows[0][1:]) if rows else None


def get_head(
    ctx: Context, config: RunnableConfig, tx: Tx | None = None
) -> Program[tuple[Stamp | None, CheckpointTuple | None]]:
    """The latest checkpoint's tuple (``config`` names none) and its :data:`Stamp`: in one transaction, or
    on PostgreSQL in one statement (the stamp is the row's)."""
    if ctx.dialect.name == "postgres":
        return (yield from _get(ctx, config, tx))
    stamp = yield from head_stamp(ctx, config)
    tup = (yield from get_tuple(ctx, config, tx)) if stamp is not None else None
    return stamp, tup


def fresh_copy(tup: CheckpointTuple) -> CheckpointTuple:
    """A tuple whose containers are new (a run changes its checkpoint's dicts and lists in place); the
    values in them (messages) are shared, as LangGraph never changes a stored value in place."""
    checkpoint: dict[str, Any] = {**tup.checkpoint}
    for key, value in checkpoint.items():
        if type(value) is dict:
            checkpoint[key] = {k: _fresh_container(v) for k, v in value.items()}
        elif type(value) is list:
            checkpoint[key] = list(value)
    return tup._replace(
        config=copy.deepcopy(tup.config),
        checkpoint=cast("Checkpoint", checkpoint),
        metadata=copy.deepcopy(tup.metadata),
        pending_writes=None if tup.pending_writes is None else list(tup.pending_writes),
    )


def _fresh_container(value: Any) -> Any:
    if type(value) is dict:
        return dict(value)
    return list(value) if type(value) is list else value


def mark_loaded(ctx: Context, config: RunnableConfig, tup: CheckpointTuple | None) -> CheckpointTuple | None:
    """Mark what a LangGraph run loads (see :data:`FROM_HEAD`): its puts carry the mark back."""
    conf = config["configurable"]
    if RUN_KEY not in conf:
        return tup
    latest = not conf.get("checkpoint_id")
    run = {RUN_MARK: uuid.uuid4().hex} if latest else {}  # tells this run's puts and tasks apart
    if isinstance(conf, dict):
        conf.update(run)  # the run's own config, which its tasks' configs are made from
    if tup is None:
        if latest and isinstance(conf, dict):
            # A run that found the thread empty builds its first checkpoint on this very config (there
            # is no tuple to carry the mark), so the mark goes here: every later put of the run has it.
            conf[FROM_HEAD] = True
        return None
    if latest:
        # The run starts from this checkpoint: a model call resumed from it (``invoke(None)``) runs from a
        # checkpoint the run did not write, and may claim the thread at once.
        ctx.claims.record_written(run[RUN_MARK], tup.checkpoint["id"])
    marked = {**tup.config["configurable"], FROM_HEAD: latest, **run}
    return tup._replace(config={**tup.config, "configurable": marked})


Cursor = tuple[str, int, str]


_MISSING = object()


def _meta_matches(metadata: Mapping[str, Any], key: str, wanted: Any) -> bool:
    """``metadata[key] == wanted``; a dotted key also names a nested value (``"user.level"``), as stock SQLite.

    Filters are applied here, never spliced into SQL, so any key is safe.
    """
    value = metadata.get(key, _MISSING)
    if value is _MISSING and "." in key:
        value = metadata
        for part in key.split("."):
            value = value.get(part, _MISSING) if isinstance(value, Mapping) else _MISSING
            if value is _MISSING:
                break
    return value is not _MISSING and value == wanted


def list_page(
    ctx: Context,
    config: RunnableConfig | None,
    *,
    filter: Mapping[str, Any] | None,
    before: RunnableConfig | None,
    cursor: Cursor | None,
    page_size: int,
    shared: dict[int, dict[int, Any]],
    sized: frozenset[str] = frozenset(),
    lengths: dict[str, dict[str, int]] | None = None,
) -> Program[tuple[list[CheckpointTuple], Cursor | None]]:
    """One page of ``list()``: matching tuples, and where the next page starts (None at the end)."""
    conf = (config or {}).get("configurable", {})
    params: list[Any] = []
    thread = conf.get("thread_id") is not None
    ns = conf.get("checkpoint_ns") is not None
    checkpoint_id = conf.get("checkpoint_id")
    before_id = (before or {}).get("configurable", {}).get("checkpoint_id")
    if thread:
        params.append(thread_id_of(conf))
    if ns:
        params.append(str(conf["checkpoint_ns"]))
    if checkpoint_id:
        params.append(ids.stored(str(checkpoint_id)))
    if before_id:
        params.append(ids.stored(str(before_id)))
    if cursor:
        params.extend(cursor)
    params.append(page_size)
    text = ctx.dialect.list_page(
        thread=thread, ns=ns, checkpoint_id=bool(checkpoint_id), before=bool(before_id), cursor=bool(cursor)
    )
    raw = yield ctx.q(text, tuple(params))
    next_cursor: Cursor | None = None
    if len(raw) == page_size:
        last = raw[-1]
        next_cursor = (last[3], last[1], last[2])
    rows = _rows(ctx, raw)
    if filter:
        rows = [r for r in rows if all(_meta_matches(r.metadata, k, v) for k, v in filter.items())]
    if not rows:
        return [], next_cursor
    tuples = yield from _materialize(ctx, rows, shared, sized, lengths)
    return tuples, next_cursor


def _stored_lists(desc: Any, out: set[int]) -> None:
    if isinstance(desc, list):
        if desc[0] == 1:
            out.add(desc[1])
        elif desc[0] == 2:
            for sub in desc[2::2]:
                _stored_lists(sub, out)


def values_of(
    ctx: Context, tid: int, descriptors: Sequence[Any], *, gone_is_stale: bool = False
) -> Program[list[Any]]:
    """The values of a thread's stored descriptors, each deserialized on its own as in a tuple
    :func:`get_tuple` reads (no object shared between two values): lists and items from the caches,
    else read. A DeltaChannel's history (:mod:`._delta`) is read with it."""
    wanted: set[int] = set()
    for desc in descriptors:
        _stored_lists(desc, wanted)
    lists = (
        {no: refs for no, (refs, _) in (yield from load_lists(ctx, tid, wanted)).items()} if wanted else {}
    )
    refs = [codec.refs_of_descriptor(desc, lists) for desc in descriptors]
    held = yield from load_payloads(ctx, tid, {n for r in refs for n in r}, gone_is_stale=gone_is_stale)
    flat = iter(
        codec.loads_many(
            ctx.serde,
            [held[n] for desc, r in zip(descriptors, refs, strict=True) if _is_list(desc) for n in r],
        )
    )

    def value(desc: Any) -> Any:
        if isinstance(desc, int):
            return ctx.serde.loads_typed(held[desc])
        if desc[0] == 2:
            return _snapshot.of_stored({desc[i]: value(desc[i + 1]) for i in range(1, len(desc), 2)})
        return codec.loads_many(ctx.serde, [held[n] for n in codec.refs_of_descriptor(desc, lists)])

    out = []
    for desc, r in zip(descriptors, refs, strict=True):
        out.append([next(flat) for _ in r] if _is_list(desc) else value(desc))
    return out


def list_threads(ctx: Context) -> Program[list[str]]:
    rows = yield ctx.q(sql.LIST_THREADS)
    return [r[0] for r in rows]
