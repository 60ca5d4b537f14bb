"""Every checkpointer operation, once, as a generator of SQL statements (no I/O here).

An operation is a program of :mod:`remem._statements`: it yields statements and receives each one's rows
back; the sync and async savers of both backends only run the statements (``SyncSaver._run`` and
``AsyncSaver._run`` in ``_base``, with that module's drivers), inside one transaction per operation.
Work that needs no database (serializing values) happens before the first statement, so a write holds
its locks as briefly as possible.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from remem._statements import Fetch, Program, Statement
from remem.checkpoint import _codec as codec
from remem.checkpoint import _sql as sql
from remem.checkpoint._cache import Head, SaverCache, ThreadDigests
from remem.errors import RememUsageError, ThreadBusyError
from remem.layout import check_label

T = TypeVar("T")

FROM_HEAD = "__pregel_remem_from_head"
"""Set by :func:`get_tuple` in the config of a checkpoint that a LangGraph run loaded: True when the run
asked for the thread's latest checkpoint, False when it addressed one (time travel). The run passes the
config back with each :func:`put`, so a run that started from the head can be kept from forking it.

The ``__pregel_`` prefix keeps the mark out of everything LangGraph shows of a run's configs: the
``checkpoints`` and ``debug`` stream payloads (``config`` and ``parent_config``) drop such keys
(``rm_pregel_keys``), so they equal the configs ``get_state_history`` lists, as with a stock saver; and
checkpoint metadata never copies a key that starts with ``__``."""
RUN_KEY = "__pregel_runtime"
"""What LangGraph puts in the ``configurable`` of a run's own reads and writes (never in get_state's)."""


@dataclass
class Tx:
    """Collects what to do once the operation's transaction has committed."""

    after_commit: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class Context:
    """What every operation needs: the dialect, the serializer and the saver's caches."""

    dialect: sql.Dialect
    serde: SerializerProtocol
    cache: SaverCache
    trusted_types: bool = False

    _names: dict[str, codec.EncodedItem] = field(default_factory=dict)

    def name_item(self, name: str) -> codec.EncodedItem:
        """A channel or node name as an item (serialized once per saver: names recur in every checkpoint)."""
        item = self._names.get(name)
        if item is None:
            item = self._names.setdefault(name, codec.encode_item(self.serde, name))
        return item

    def q(self, text: str, params: Any = (), fetch: Fetch = "all") -> Statement:
        return Statement(self.dialect.sql(text), params, fetch)


Encoded = tuple[str, Any]
"""("item", EncodedItem), ("list", [EncodedItem, ...]) or ("dict", [(key, Encoded), ...])."""


def _thread_id(conf: Mapping[str, Any]) -> str:
    """The thread id a config names, as text; an id that is not valid text (a lone surrogate, NUL) is refused
    with remem's one check of ids before any statement is sent."""
    return check_label(str(conf["thread_id"]), "thread_id")


def _encode(ctx: Context, value: Any, *, nested: bool = False) -> Encoded:
    if type(value) is list:
        return ("list", [codec.encode_item(ctx.serde, v) for v in value])
    if (
        not nested
        and type(value) is dict
        and any(type(v) is list for v in value.values())
        and all(type(k) is str for k in value)
    ):
        # A dict holding lists (graph input such as {"messages": [...]}) shares the lists' items.
        return ("dict", [(k, _encode(ctx, v, nested=True)) for k, v in value.items()])
    return ("item", codec.encode_item(ctx.serde, value))


def _inline(alloc: _Allocator, enc: Encoded) -> Any:
    """The descriptor of a value with any list in it inline (for writes and dict members)."""
    if enc[0] == "item":
        return alloc.item(enc[1])
    if enc[0] == "list":
        return [0, *codec.encode_refs([alloc.item(e) for e in enc[1]])]
    return [2, *(x for k, sub in enc[1] for x in (k, _inline(alloc, sub)))]


class _Allocator:
    """Numbers the items and lists one write adds to a thread."""

    def __init__(self, known: ThreadDigests, next_item: int, next_list: int) -> None:
        self.known = known.digests
        self.next_item = next_item
        self.next_list = next_list
        self.items: list[tuple[int, codec.EncodedItem]] = []
        self.new: dict[bytes, int] = {}
        self.lists: list[codec.ListRow] = []
        self.list_refs: dict[int, tuple[tuple[int, ...], int]] = {}

    def item(self, enc: codec.EncodedItem) -> int:
        digest = enc[0]
        no = self.new.get(digest)
        if no is None:
            no = self.known.get(digest)
        if no is None:
            no = self.next_item
            self.next_item += 1
            self.new[digest] = no
            self.items.append((no, enc))
        return no

    def new_list(
        self, base: int | None, depth: int, delta: tuple[int, int, list[int]], refs: list[int]
    ) -> int:
        no = self.next_list
        self.next_list += 1
        self.lists.append(codec.ListRow(no, base, depth, *delta))
        self.list_refs[no] = (tuple(refs), depth)
        return no

    def commit(self, cache: SaverCache, state: ThreadDigests) -> None:
        cache.add_digests(state, self.new.items(), self.next_item)
        cache.put_payloads(state.tid, {no: (e[1], e[2]) for no, e in self.items})

    def statements(self, ctx: Context, tid: int, start: tuple[int, int]) -> Iterable[Statement]:
        if self.items:
            items = [(tid, no, e[0], codec.item_blob(e[1], e[2])) for no, e in self.items]
            yield ctx.q(sql.INSERT_ITEM, items, "many")
        if self.lists:
            lists = [(tid, r.list_no, r.base, codec.encode_list_row(r)) for r in self.lists]
            yield ctx.q(sql.INSERT_LIST, lists, "many")
        if (self.next_item, self.next_list) != start:
            yield ctx.q(sql.SET_COUNTERS, (self.next_item, self.next_list, tid), "none")


def _thread_for_write(
    ctx: Context, thread_id: str
) -> Program[tuple[ThreadDigests, _Allocator, tuple[int, int]]]:
    """Creates or locks the thread's row, and brings the digest cache up to date with the database."""
    now = time.time()
    ((tid, epoch, next_item, next_list),) = yield ctx.q(sql.UPSERT_THREAD, (thread_id, now, now))
    state = ctx.cache.digests(tid, thread_id, epoch)
    if state.next_item < next_item:
        rows = yield ctx.q(sql.ITEM_DIGESTS_FROM, (tid, state.next_item))
        ctx.cache.add_digests(state, ((d, no) for no, d in rows), next_item)
    return state, _Allocator(state, next_item, next_list), (next_item, next_list)


def _load_lists(
    ctx: Context, tid: int, wanted: Iterable[int]
) -> Program[dict[int, tuple[tuple[int, ...], int]]]:
    """Rebuilds stored lists (item numbers and chain depth), reading only the rows not cached."""
    out: dict[int, tuple[tuple[int, ...], int]] = {}
    rows: dict[int, codec.ListRow] = {}
    missing = set()
    for no in wanted:
        hit = ctx.cache.list_refs(tid, no)
        if hit is None:
            missing.add(no)
        else:
            out[no] = hit
    while missing:
        fetched = yield ctx.q(ctx.dialect.lists_in(), (tid, ctx.dialect.list_param(sorted(missing))))
        missing = set()
        for no, base, body in fetched:
            row = codec.decode_list_row(no, base, bytes(body))
            rows[no] = row
            if base is not None and base not in rows and base not in out:
                hit = ctx.cache.list_refs(tid, base)
                if hit is None:
                    missing.add(base)
                else:
                    out[base] = hit
        if not fetched:
            break

    def rebuild(no: int) -> tuple[tuple[int, ...], int]:
        done = out.get(no)
        if done is not None:
            return done
        row = rows[no]
        if row.base is None:
            refs = tuple(row.middle)
        else:
            base_refs, _ = rebuild(row.base)
            refs = tuple(codec.apply_list_delta(base_refs, row.prefix, row.suffix, row.middle))
        out[no] = (refs, row.depth)
        return out[no]

    for no in sorted(rows):
        rebuild(no)
    ctx.cache.put_lists(tid, {no: out[no] for no in rows})
    return out


def _assign(ctx: Context, tid: int, alloc: _Allocator, enc: Encoded, base: Any) -> Program[Any]:
    """The descriptor of one value, adding the items and list rows it needs."""
    if enc[0] != "list":
        return _inline(alloc, enc)
    refs = [alloc.item(e) for e in enc[1]]
    if len(refs) <= codec.INLINE_LIST_MAX:
        return [0, *codec.encode_refs(refs)]
    if isinstance(base, list) and base[0] == 1:
        lists = yield from _load_lists(ctx, tid, [base[1]])
        base_refs, depth = lists[base[1]]
        if tuple(refs) == base_refs:
            return base
        if depth < codec.MAX_CHAIN:
            delta = codec.list_delta(base_refs, refs)
            if 2 * len(delta[2]) < len(refs):
                return [1, alloc.new_list(base[1], depth + 1, delta, refs)]
    return [1, alloc.new_list(None, 0, (0, 0, refs), refs)]


def _parent(ctx: Context, state: ThreadDigests, ns: str, parent_id: str | None) -> Program[Head | None]:
    if parent_id is None:
        return None
    tid = state.tid
    head = ctx.cache.head(tid, ns)
    if head is not None and head.checkpoint_id == parent_id and head.epoch == state.epoch:
        return head
    rows = yield ctx.q(sql.SELECT_BODY, (tid, ns, parent_id))
    if not rows:
        return None
    raw = codec.decode_body(bytes(rows[0][0]))
    return Head(parent_id, state.epoch, raw.versions, raw.descriptors)


def from_head(conf: Mapping[str, Any]) -> bool:
    """Whether a put comes from a LangGraph run that started from the thread's latest checkpoint (or
    found the thread empty): its checkpoints must extend the head, never branch off behind it."""
    if RUN_KEY not in conf:  # update_state, a copy, a direct saver call: stock semantics
        return False
    return conf.get(FROM_HEAD) is True


def _check_head(
    ctx: Context, tid: int, thread_id: str, ns: str, parent_id: str | None, checkpoint_id: str
) -> Program[None]:
    """Refuse a run's checkpoint whose parent is no longer the thread's head (another run wrote since
    this one read the thread): stored, it would fork the history silently. The thread's row is locked
    by this transaction, so no other write can come between this check and the insert."""
    rows = yield ctx.q(sql.HEAD_ID, (tid, ns))
    head = rows[0][0] if rows else None
    if head is None and parent_id is not None:
        # The checkpoint this run started from is gone: the thread was deleted or erased (remem forget)
        # while the run was under way. Stored, this checkpoint would write the erased history back.
        raise ThreadBusyError(
            f"thread {thread_id!r} was deleted or erased while this run was under way (its checkpoint "
            f"{parent_id} is gone), so this run's checkpoint was refused: stored, it would bring back "
            "what was erased. This step wrote nothing; send the turn again to start from the thread as "
            "it is now"
        )
    if head is None or head in (parent_id, checkpoint_id):
        return
    raise ThreadBusyError(
        f"thread {thread_id!r} moved on while this run was under way: another run wrote checkpoint "
        f"{head} after this run read the thread, so this run's checkpoint was refused (stored, it would "
        "fork the thread's history silently). This step wrote nothing; send turns one at a time per "
        "thread with remem.run_turn (a second turn then waits for the thread's lease), or retry"
    )


def put(
    ctx: Context,
    tx: Tx,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Program[RunnableConfig]:
    conf = config["configurable"]
    thread_id = _thread_id(conf)
    ns = str(conf.get("checkpoint_ns", ""))
    parent_id = conf.get("checkpoint_id")
    values = checkpoint["channel_values"]
    pending = {ch: _encode(ctx, values[ch]) for ch in new_versions if ch in values}
    meta = get_checkpoint_metadata(config, metadata)
    run_id = meta.get("run_id")
    meta_blob = codec.encode_metadata(ctx.serde, meta)

    state, alloc, start = yield from _thread_for_write(ctx, thread_id)
    tid = state.tid
    if from_head(conf):
        yield from _check_head(ctx, tid, thread_id, ns, parent_id, checkpoint["id"])
    parent = yield from _parent(ctx, state, ns, parent_id)
    names = {name: alloc.item(ctx.name_item(name)) for name in codec.body_names(checkpoint)}
    descriptors: dict[int, Any] = {}
    for ch, version in checkpoint["channel_versions"].items():
        n = names[ch]
        if ch in new_versions:
            enc = pending.get(ch)
        elif parent is not None and parent.versions.get(n) == version and n in parent.descriptors:
            descriptors[n] = parent.descriptors[n]
            continue
        else:
            enc = _encode(ctx, values[ch]) if ch in values else None
        if enc is not None:
            base = parent.descriptors.get(n) if parent is not None else None
            descriptors[n] = yield from _assign(ctx, tid, alloc, enc, base)
    body = codec.encode_body(ctx.serde, checkpoint, descriptors, names)
    yield from alloc.statements(ctx, tid, start)
    row = (
        tid,
        ns,
        checkpoint["id"],
        parent_id,
        None if run_id is None else str(run_id),
        body,
        meta_blob,
        tid,
        ns,
    )
    yield ctx.q(sql.INSERT_CHECKPOINT, row, "none")

    versions = {names[k]: v for k, v in checkpoint["channel_versions"].items()}
    head = Head(checkpoint["id"], state.epoch, versions, descriptors)

    def committed() -> None:
        alloc.commit(ctx.cache, state)
        ctx.cache.put_lists(tid, alloc.list_refs)
        ctx.cache.set_head(tid, ns, head)

    tx.after_commit.append(committed)
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}


def put_writes(
    ctx: Context,
    tx: Tx,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> Program[None]:
    conf = config["configurable"]
    thread_id = _thread_id(conf)
    ns = str(conf.get("checkpoint_ns", ""))
    checkpoint_id = conf["checkpoint_id"]
    encoded = [(WRITES_IDX_MAP.get(ch, idx), ch, _encode(ctx, v)) for idx, (ch, v) in enumerate(writes)]
    if not encoded:
        return
    state, alloc, start = yield from _thread_for_write(ctx, thread_id)
    tid = state.tid
    upserts: list[tuple[Any, ...]] = []
    inserts: list[tuple[Any, ...]] = []
    for idx, ch, enc in encoded:
        desc = _inline(alloc, enc)
        channel, path = alloc.item(ctx.name_item(ch)), alloc.item(ctx.name_item(task_path))
        row = (tid, ns, checkpoint_id, task_id, idx, channel, path, ormsgpack.packb(desc))
        (upserts if idx < 0 else inserts).append(row)
    yield from alloc.statements(ctx, tid, start)
    if inserts:
        yield ctx.q(sql.INSERT_WRITE, inserts, "many")
    if upserts:
        yield ctx.q(sql.UPSERT_WRITE, upserts, "many")
    tx.after_commit.append(lambda: alloc.commit(ctx.cache, state))


# --- reading -------------------------------------------------------------------------------------


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
        out.append(_Row(thread_id, tid, ns, cid, parent_id, codec.decode_body(bytes(body)), metadata, epoch))
    return out


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
    held = ctx.cache.payloads(tid, channels)
    missing = sorted(channels - held.keys())
    if missing:
        found = yield ctx.q(ctx.dialect.items_in(), (tid, ctx.dialect.list_param(missing)))
        fetched = {no: codec.unpack_blob(data, trusted_types=ctx.trusted_types) for no, data in found}
        ctx.cache.put_payloads(tid, fetched)
        held.update(fetched)
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
) -> Program[list[CheckpointTuple]]:
    """Reads the writes, lists and items of ``rows`` (checkpoints of one or more threads) into tuples.

    With ``shared``, each item is deserialized once and the object is shared by every tuple built with
    the same dict (``list()`` does this); without it every occurrence is deserialized on its own.

    A list value of a channel in ``sized`` is not read: the tuple holds an empty list in its place and
    ``lengths[checkpoint_id][channel]`` its length, so listing a long thread reads no message. Pending
    writes to those channels are not read either (an empty list stands for their value).
    """
    by_thread: dict[tuple[int, str], list[_Row]] = {}
    for r in rows:
        by_thread.setdefault((r.tid, r.ns), []).append(r)
    for (tid, ns), group in by_thread.items():
        ids = [r.checkpoint_id for r in group]
        found = yield ctx.q(ctx.dialect.writes_in(), (tid, ns, ctx.dialect.list_param(ids)))
        by_id = {r.checkpoint_id: r for r in group}
        for cid, task_id, idx, channel, task_path, packed in found:
            by_id[cid].writes.append((task_path, task_id, channel, idx, ormsgpack.unpackb(bytes(packed))))

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
        loaded = (yield from _load_lists(ctx, tid, stored)) if stored else {}
        lists[tid] = plain = {no: refs_ for no, (refs_, _) in loaded.items()}
        refs: set[int] = set().union(
            *(plain[no] for no in stored)
        )  # each list once, however many rows use it
        for r in thread_rows:
            refs.update(r.body.name_refs())
            for ch, d in r.body.descriptors.items():
                if ch in skip and _is_list(d):
                    continue
                if not (isinstance(d, list) and d[0] == 1):
                    refs.update(codec.refs_of_descriptor(d, plain))
            for w in r.writes:
                refs.update((w[0], w[2]))
                if w[2] not in skip:
                    refs.update(codec.refs_of_descriptor(w[4], plain))
        known = shared.setdefault(tid, {}) if shared is not None else {}
        refs.difference_update(known)
        payloads[tid] = held = ctx.cache.payloads(tid, refs)
        missing = sorted(refs - held.keys())
        if missing:
            found = yield ctx.q(ctx.dialect.items_in(), (tid, ctx.dialect.list_param(missing)))
            fetched = {no: codec.unpack_blob(data, trusted_types=ctx.trusted_types) for no, data in found}
            ctx.cache.put_payloads(tid, fetched)
            held.update(fetched)
        if shared is not None and refs:
            order = sorted(refs)
            known.update(zip(order, codec.loads_many(ctx.serde, [held[n] for n in order]), strict=True))

    def name(tid: int, no: int) -> str:
        if shared is not None:
            return str(shared[tid][no])
        return str(ctx.serde.loads_typed(payloads[tid][no]))

    def value(tid: int, desc: Any) -> Any:
        if isinstance(desc, list) and desc[0] == 2:
            return {desc[i]: value(tid, desc[i + 1]) for i in range(1, len(desc), 2)}
        if shared is not None:
            objects = shared[tid]
            if isinstance(desc, int):
                return objects[desc]
            refs = lists[tid][desc[1]] if desc[0] == 1 else codec.refs_of_descriptor(desc, {})
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
                size = sizes[r.tid][d[1]] if d[0] == 1 else len(d) - 1
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


def get_tuple(ctx: Context, config: RunnableConfig) -> Program[CheckpointTuple | None]:
    conf = config["configurable"]
    thread_id = _thread_id(conf)
    ns = str(conf.get("checkpoint_ns", ""))
    checkpoint_id = conf.get("checkpoint_id")
    if checkpoint_id:
        raw = yield ctx.q(sql.GET_CHECKPOINT, (thread_id, ns, checkpoint_id))
    else:
        raw = yield ctx.q(sql.GET_LATEST_CHECKPOINT, (thread_id, ns))
    if not raw:
        return None
    rows = _rows(ctx, raw)
    (tup,) = yield from _materialize(ctx, rows, None)
    r = rows[0]
    ctx.cache.set_head(r.tid, r.ns, Head(r.checkpoint_id, r.epoch, r.body.versions, r.body.descriptors))
    return tup


Stamp = tuple[Any, ...]
"""(checkpoint id, thread epoch, pending write count) of a thread's latest checkpoint: what tells whether
a tuple read before is still the one :func:`get_tuple` would read."""


def head_stamp(ctx: Context, config: RunnableConfig) -> Program[Stamp | None]:
    conf = config["configurable"]
    rows = yield ctx.q(sql.HEAD_STAMP, (_thread_id(conf), str(conf.get("checkpoint_ns", ""))))
    return tuple(rows[0]) if rows else None


def get_head(ctx: Context, config: RunnableConfig) -> Program[tuple[Stamp | None, CheckpointTuple | None]]:
    """The latest checkpoint's tuple (``config`` names none) and its :data:`Stamp`, in one transaction."""
    stamp = yield from head_stamp(ctx, config)
    tup = (yield from get_tuple(ctx, config)) if stamp is not None else None
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


def mark_loaded(config: RunnableConfig, tup: CheckpointTuple | None) -> CheckpointTuple | None:
    """Mark what a LangGraph run loads (see :data:`FROM_HEAD`): its puts carry the mark back."""
    conf = config["configurable"]
    if RUN_KEY not in conf:
        return tup
    latest = not conf.get("checkpoint_id")
    if tup is None:
        if latest and isinstance(conf, dict):
            # A run that found the thread empty builds its first checkpoint on this very config (there
            # is no tuple to carry the mark), so the mark goes here: every later put of the run has it.
            conf[FROM_HEAD] = True
        return None
    marked = {**tup.config["configurable"], FROM_HEAD: latest}
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
        params.append(_thread_id(conf))
    if ns:
        params.append(str(conf["checkpoint_ns"]))
    if checkpoint_id:
        params.append(checkpoint_id)
    if before_id:
        params.append(before_id)
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


def list_threads(ctx: Context) -> Program[list[str]]:
    rows = yield ctx.q(sql.LIST_THREADS)
    return [r[0] for r in rows]


# --- deleting, copying, pruning --------------------------------------------------------------------


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


CheckpointInfo = tuple[str, str, str | None, str]
"""(namespace, checkpoint id, run id, creation timestamp) of one stored checkpoint."""
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
        (ns, cid): (parent_id, run_id, codec.decode_body(bytes(body)))
        for ns, cid, parent_id, run_id, body in raw
    }
    gone = doomed([(ns, cid, v[1], v[2].created) for (ns, cid), v in decoded.items()])
    if not gone:
        return 0
    keys = sorted(gone)
    yield ctx.q(sql.DELETE_CHECKPOINT_WRITES, [(tid, ns, cid) for ns, cid in keys], "many")
    yield ctx.q(sql.DELETE_CHECKPOINT, [(tid, ns, cid) for ns, cid in keys], "many")
    orphans = [
        (tid, ns, cid) for (ns, cid), v in decoded.items() if (ns, cid) not in gone and (ns, v[0]) in gone
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
            while no is not None and no not in live_lists:
                live_lists.add(no)
                no = rows[no].base
        else:
            live_items.update(codec.refs_of_descriptor(d, {}))
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
    """Picks every checkpoint but the latest of each namespace (only those created before ``before``)."""

    def pick(checkpoints: list[CheckpointInfo]) -> set[tuple[str, str]]:
        latest: dict[str, str] = {}
        for ns, cid, _, _ in checkpoints:
            if cid > latest.get(ns, ""):
                latest[ns] = cid
        out = set()
        for ns, cid, _, ts in checkpoints:
            if cid == latest[ns]:
                continue
            created = _created(ts)
            if before is None or (created is not None and created < before):
                out.add((ns, cid))
        return out

    return pick


def of_runs(run_ids: set[str]) -> Picker:
    def pick(checkpoints: list[CheckpointInfo]) -> set[tuple[str, str]]:
        return {(ns, cid) for ns, cid, run_id, _ in checkpoints if run_id in run_ids}

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
