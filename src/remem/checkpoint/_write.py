"""The checkpointer's writes, as programs of statements: ``put`` (a checkpoint, sharing the items and
lists it has in common with its parent) and ``put_writes`` (a task's pending writes)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from remem._lease import ThreadLease, _fence
from remem._statements import Program, Statement
from remem.checkpoint import _codec as codec
from remem.checkpoint import _ids as ids
from remem.checkpoint import _snapshot
from remem.checkpoint import _sql as sql
from remem.checkpoint._cache import Head, SaverCache, ThreadDigests
from remem.checkpoint._ops import FROM_HEAD, RUN_KEY, RUN_MARK, Context, Tx, load_lists, thread_id_of
from remem.errors import ThreadBusyError

Encoded = tuple[str, Any]
"""("item", EncodedItem), ("list", [EncodedItem, ...]) or ("dict", [(key, Encoded), ...])."""


def _encode(ctx: Context, value: Any, *, nested: bool = False) -> Encoded:
    if type(value) is list:
        return ("list", [codec.encode_item(ctx.serde, v) for v in value])
    if not nested and (snapshot := _snapshot.to_store(value)) is not None:
        return ("dict", [(k, _encode(ctx, v, nested=True)) for k, v in snapshot.items()])
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


BASES_KEPT = 4
"""Items a thread's next write may be compressed after: the last few stored (see :func:`~._codec.item_blob`)."""


class _Allocator:
    """Numbers the items and lists one write adds to a thread."""

    def __init__(self, known: ThreadDigests, next_item: int, next_list: int) -> None:
        self.known = known.digests
        self.upto = next_item
        self.next_item = next_item
        self.next_list = next_list
        self.items: list[tuple[int, codec.EncodedItem]] = []
        self.new: dict[bytes, int] = {}
        self.lists: list[codec.ListRow] = []
        self.list_refs: dict[int, tuple[tuple[int, ...], int]] = {}
        self.bases = list(known.bases)

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
        # The map is complete past this write's items only if it was complete up to them.
        complete = state.next_item >= self.upto
        cache.add_digests(state, self.new.items(), self.next_item if complete else state.next_item)
        state.next_list = self.next_list if complete else -1
        cache.put_payloads(state.tid, {no: (e[1], e[2]) for no, e in self.items})
        state.bases = tuple(self.bases[-BASES_KEPT:])

    def statements(
        self, ctx: Context, tid: int, start: tuple[int, int], guarded: bool = False
    ) -> Iterable[Statement]:
        """The rows this write adds; ``guarded``: the counters are set by the write's guard instead."""
        if self.items:
            items = []
            for no, (digest, type_, data) in self.items:
                blob = codec.item_blob(type_, data, self.bases)
                if codec.patch_base(blob) is None and len(data) >= codec.BASE_MIN:
                    self.bases.append((no, data))
                items.append((tid, no, digest, blob))
            yield ctx.q(sql.INSERT_ITEM, items, "many")
        if self.lists:
            lists = [(tid, r.list_no, r.base, codec.encode_list_row(r)) for r in self.lists]
            yield ctx.q(sql.INSERT_LIST, lists, "many")
        if not guarded and (self.next_item, self.next_list) != start:
            yield ctx.q(sql.SET_COUNTERS, (self.next_item, self.next_list, tid), "none")


def _digests(encoded: Iterable[Encoded]) -> Iterator[bytes]:
    for kind, value in encoded:
        if kind == "item":
            yield value[0]
        elif kind == "list":
            yield from (e[0] for e in value)
        else:
            yield from _digests(sub for _, sub in value)


def _learn(ctx: Context, state: ThreadDigests, upto: int, wanted: Iterable[bytes]) -> Program[None]:
    """Brings into the digest cache the thread's items (numbered below ``upto``) among ``wanted``: by
    their digests when they are few beside the items the cache lacks (a fresh process's first write on
    a long thread), else by reading every digest the cache lacks (it is then complete again)."""
    if state.next_item >= upto:
        return
    known = state.digests
    unknown = list(dict.fromkeys(d for d in wanted if d not in known))
    if not unknown:
        return
    if len(unknown) * 4 >= upto - state.next_item:
        rows = yield ctx.q(sql.ITEM_DIGESTS_FROM, (state.tid, state.next_item))
        ctx.cache.add_digests(state, ((d, no) for no, d in rows), upto)
        return
    for start in range(0, len(unknown), sql.DIGESTS_RUN):
        run = unknown[start : start + sql.DIGESTS_RUN]
        rows = yield ctx.q(ctx.dialect.items_with_digests(), ctx.dialect.digests_param(state.tid, run))
        ctx.cache.add_digests(state, ((d, no) for no, d in rows), state.next_item)


def _thread_for_write(
    ctx: Context, thread_id: str, wanted: Iterable[bytes]
) -> Program[tuple[ThreadDigests, _Allocator, tuple[int, int]]]:
    """Creates or locks the thread's row, and brings into the digest cache what the database holds of
    the ``wanted`` digests (the values and names the write stores)."""
    now = time.time()
    ((tid, epoch, next_item, next_list),) = yield ctx.q(sql.UPSERT_THREAD, (thread_id, now, now))
    state = ctx.cache.digests(tid, thread_id, epoch)
    yield from _learn(ctx, state, next_item, wanted)
    return state, _Allocator(state, next_item, next_list), (next_item, next_list)


def _cached_thread(ctx: Context, thread_id: str, lease: ThreadLease | None) -> ThreadDigests | None:
    """The thread as this saver's last write left it, when a PostgreSQL write may trust it (see
    :data:`~remem.checkpoint._sql.GUARD_THREAD`): its counters are known and its digests complete."""
    if ctx.dialect.name != "postgres" or (lease is not None and not lease.active):
        return None
    state = ctx.cache.thread_named(thread_id)
    return None if state is None or state.next_list < 0 else state


def _fence_guard(ctx: Context, lease: ThreadLease | None) -> Program[None]:
    """The lease's check (:meth:`ThreadLease.fenced`) as a statement whose answer is not awaited: a moved
    token fails the transaction, which then runs again the usual way (and fails as the check does)."""
    if lease is None:
        return
    if lease.single_write or lease.fence is None:
        yield from lease.fenced(ctx.dialect.name)  # moves the token on, or checks nothing: no answer awaited
        return
    key = _fence.lease_key(lease.scope, lease.thread_id)
    yield ctx.q(sql.GUARD_FENCE, (key, lease.fence), "none")


def _guard(
    ctx: Context,
    state: ThreadDigests,
    alloc: _Allocator,
    start: tuple[int, int],
    cond: str,
    args: tuple[Any, ...],
) -> Statement:
    params = (alloc.next_item, alloc.next_list, time.time(), state.tid, state.epoch, *start, *args)
    return ctx.q(sql.GUARD_THREAD.format(cond=cond), params, "none")


def _assign(ctx: Context, tid: int, alloc: _Allocator, enc: Encoded, base: Any) -> Program[Any]:
    """The descriptor of one value, adding the items and list rows it needs."""
    if enc[0] != "list":
        return _inline(alloc, enc)
    refs = [alloc.item(e) for e in enc[1]]
    if len(refs) <= codec.INLINE_LIST_MAX:
        return [0, *codec.encode_refs(refs)]
    if isinstance(base, list) and base[0] == 1:
        lists = yield from load_lists(ctx, tid, [base[1]])
        base_refs, depth = lists[base[1]]
        if refs == codec.refs_of_descriptor(base, lists={base[1]: base_refs}):
            return base
        stored = len(base_refs)
        if stored < len(refs) <= stored + codec.TAIL_MAX and tuple(refs[:stored]) == base_refs:
            return [1, base[1], *codec.encode_refs(refs[stored:])]  # appended: no new row
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
    rows = yield ctx.q(sql.SELECT_BODY, (tid, ns, ids.stored(parent_id)))
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
    head = ids.shown(rows[0][0]) if rows else None
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
    lease: ThreadLease | None = None,
) -> Program[RunnableConfig]:
    """A checkpoint; under ``lease``, only while the thread's fencing token is still the lease's
    (:meth:`ThreadLease.fenced`, checked in this transaction before anything is written).

    On PostgreSQL, a put on the head this saver last wrote (the usual next step of a run) reads nothing:
    its statements go in one round trip behind a guard, and a :class:`~remem.errors.StaleCacheError` from the
    transaction makes the saver run it again with ``tx.trust_cache`` False."""
    conf = config["configurable"]
    thread_id = thread_id_of(conf)
    ns = str(conf.get("checkpoint_ns", ""))
    parent_id = conf.get("checkpoint_id")
    cached = _cached_thread(ctx, thread_id, lease) if tx.trust_cache and parent_id is not None else None
    if cached is not None:
        head = ctx.cache.head(cached.tid, ns)
        if head is None or head.checkpoint_id != parent_id or head.epoch != cached.epoch:
            cached = None
    if cached is not None:
        yield from _fence_guard(ctx, lease)
    elif lease is not None:
        yield from lease.fenced(ctx.dialect.name)
    values = checkpoint["channel_values"]
    versioned = checkpoint["channel_versions"]
    # a value without a version (a checkpoint built by hand) is kept too, as stock SqliteSaver keeps it
    unversioned = [ch for ch in values if ch not in versioned]
    pending = {ch: _encode(ctx, values[ch]) for ch in [*new_versions, *unversioned] if ch in values}
    meta = get_checkpoint_metadata(config, metadata)
    run_id = meta.get("run_id")
    meta_blob = codec.encode_metadata(ctx.serde, meta)

    names_enc = [("item", ctx.name_item(name)) for name in codec.body_names(checkpoint)]
    if cached is None:
        wanted = _digests([*pending.values(), *names_enc])
        state, alloc, start = yield from _thread_for_write(ctx, thread_id, wanted)
        if from_head(conf):
            yield from _check_head(ctx, state.tid, thread_id, ns, parent_id, checkpoint["id"])
    else:
        state, start = cached, (cached.next_item, cached.next_list)
        alloc = _Allocator(state, *start)
    tid = state.tid
    parent = yield from _parent(ctx, state, ns, parent_id)
    names = {name: alloc.item(ctx.name_item(name)) for name in codec.body_names(checkpoint)}
    descriptors: dict[int, Any] = {}
    for ch, version in versioned.items():
        n = names[ch]
        if ch in new_versions:
            enc = pending.get(ch)
        elif parent is not None and parent.versions.get(n) == version and n in parent.descriptors:
            descriptors[n] = parent.descriptors[n]
            continue
        else:
            enc = _encode(ctx, values[ch]) if ch in values else None
            if enc is not None:
                yield from _learn(ctx, state, start[0], _digests([enc]))
        if enc is not None:
            base = parent.descriptors.get(n) if parent is not None else None
            descriptors[n] = yield from _assign(ctx, tid, alloc, enc, base)
    for ch in unversioned:
        descriptors[names[ch]] = yield from _assign(ctx, tid, alloc, pending[ch], None)
    body = codec.encode_body(ctx.serde, checkpoint, descriptors, names)
    if cached is not None:  # the head checked as _check_head does, while the guard locks the thread's row
        yield _guard(ctx, state, alloc, start, sql.GUARD_HEAD, (tid, ns, ids.stored(parent_id)))
    yield from alloc.statements(ctx, tid, start, guarded=cached is not None)
    row = (
        tid,
        ns,
        ids.stored(checkpoint["id"]),
        None if parent_id is None else ids.stored(parent_id),
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


def run_of(conf: Mapping[str, Any]) -> str | None:
    """The run (:data:`RUN_MARK`) whose pending writes must land on a stored checkpoint: one that started
    from the thread's head, so it knows which of its checkpoints it wrote. Other writes keep stock
    semantics (written whatever their checkpoint)."""
    run = conf.get(RUN_MARK)
    return str(run) if run and from_head(conf) else None


def put_writes(
    ctx: Context,
    tx: Tx,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    *,
    stored_only: bool = False,
    lease: ThreadLease | None = None,
) -> Program[bool]:
    """A task's pending writes; with ``stored_only``, only if their checkpoint is stored, checked under the
    thread row's lock, which an erasure takes too. False: the checkpoint is not stored, nothing was
    written (not even the thread's row). Under ``lease``, and on PostgreSQL, as :func:`put`."""
    conf = config["configurable"]
    thread_id = thread_id_of(conf)
    ns = str(conf.get("checkpoint_ns", ""))
    checkpoint_id = conf["checkpoint_id"]
    encoded = [(WRITES_IDX_MAP.get(ch, idx), ch, _encode(ctx, v)) for idx, (ch, v) in enumerate(writes)]
    if not encoded:
        return True
    # A run's writes often come before the put of their checkpoint is done (LangGraph runs both at once):
    # then the guard's check that it is stored would fail, so the usual path answers at once.
    run = run_of(conf) if stored_only else None
    trusted = tx.trust_cache and (run is None or ctx.claims.written(run, str(checkpoint_id)))
    cached = _cached_thread(ctx, thread_id, lease) if trusted else None
    if cached is not None:
        yield from _fence_guard(ctx, lease)
        state, start = cached, (cached.next_item, cached.next_list)
        alloc = _Allocator(state, *start)
    else:
        if lease is not None:
            yield from lease.fenced(ctx.dialect.name)
        if stored_only:
            rows = yield ctx.q(ctx.dialect.thread_lock(), (thread_id,))
            if not rows or not (
                yield ctx.q(sql.CHECKPOINT_EXISTS, (rows[0][0], ns, ids.stored(checkpoint_id)))
            ):
                return False
        names = [("item", ctx.name_item(name)) for name in {task_path, *(ch for _, ch, _ in encoded)}]
        wanted = _digests([*(enc for _, _, enc in encoded), *names])
        state, alloc, start = yield from _thread_for_write(ctx, thread_id, wanted)
    tid = state.tid
    stored_id, stored_task = ids.stored(str(checkpoint_id)), ids.stored(task_id)
    upserts: list[tuple[Any, ...]] = []
    inserts: list[tuple[Any, ...]] = []
    for idx, ch, enc in encoded:
        desc = _inline(alloc, enc)
        channel, path = alloc.item(ctx.name_item(ch)), alloc.item(ctx.name_item(task_path))
        row = (tid, ns, stored_id, stored_task, idx, channel, path, ormsgpack.packb(desc))
        (upserts if idx < 0 else inserts).append(row)
    if cached is not None:  # stored_only's check folded into the guard (a miss runs again, and says so)
        cond, args = (sql.GUARD_STORED, (tid, ns, stored_id)) if stored_only else ("TRUE", ())
        yield _guard(ctx, state, alloc, start, cond, args)
    yield from alloc.statements(ctx, tid, start, guarded=cached is not None)
    if inserts:
        yield ctx.q(sql.INSERT_WRITE, inserts, "many")
    if upserts:
        yield ctx.q(sql.UPSERT_WRITE, upserts, "many")
    tx.after_commit.append(lambda: alloc.commit(ctx.cache, state))
    return True
