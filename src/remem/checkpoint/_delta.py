"""``get_delta_channel_history`` without one read per ancestor, and in ``get_state_history`` without any.

A ``DeltaChannel`` stores its value only every so many updates (a ``_DeltaSnapshot``); LangGraph rebuilds
it at any other checkpoint from the nearest snapshot above it and the writes on the way, which it asks
the saver for (the base class walks the parents one ``get_tuple`` each). Two ways in here, one result:

- :func:`history` walks a checkpoint's ancestors as stored (bodies and write descriptors, a page of
  ancestors per statement, all in one transaction) and reads only the values the history returns: the
  seed and the writes. What it found is kept (:class:`~._cache.Replay`, descriptors only), and the next
  walk, a turn later, stops at that checkpoint: it reads the few checkpoints written since, checks that
  nothing the kept histories were read from changed (the thread's ``tid`` and ``epoch``, and the count of
  pending writes under the ids they span, in the same transaction), and extends them. So a turn reads
  what a plain graph's turn reads (every message of the state, once), not the 100-250 checkpoints back
  to the last snapshot; another process's write to those checkpoints, a prune or a delete is seen.
  A put through this saver that writes one of those checkpoints again (its id in the span) drops the
  kept histories before it starts and after it commits, and a history read that ran meanwhile neither
  keeps what it found nor answers from a kept history it took before the put
  (:class:`~._cache.Watch`): its snapshot may hold the rows from either side of the put. The same put
  by another process is not seen (no row of a checkpoint is read from the span; LangGraph never puts a
  checkpoint twice): a version per thread row bumped by such a put would cover it.
- :class:`Listings` keeps what one ``list()`` call returned. ``get_state_history`` lists the thread and
  then asks, for each listed checkpoint, the history of that very tuple's config: it is answered from
  the listing, each checkpoint's history extending its parent's, so listing N checkpoints reads and
  decodes what a plain graph's listing does, and no more. A listed tuple's history is the one its listing
  read (a put or erasure through this saver drops the listings of the thread it changes).

  A listing lives as long as the configs it listed (each holds it: :class:`ListedConfig`) and no longer:
  the saver keeps only weak references, so a 100,000-message thread's listing is freed with the tuples
  its caller drops, not held until later listings push it out.
"""

from __future__ import annotations

import copy
import functools
import threading
import weakref
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, PendingWrite, writes_sort_key

from remem._statements import Program
from remem.checkpoint import _codec as codec
from remem.checkpoint import _ids, _read
from remem.checkpoint._cache import Replay, StoredWrite, Watch
from remem.checkpoint._ops import Context, Tx, load_payloads, thread_id_of
from remem.checkpoint._snapshot import SNAPSHOT
from remem.errors import StaleCacheError

T = TypeVar("T")

__all__ = [
    "ANCESTORS",
    "FIRST_PAGE",
    "ListedConfig",
    "Listings",
    "Shared",
    "history",
    "one_statement",
    "replayed",
]

FIRST_PAGE = 16
ANCESTORS = 256
"""Ancestors read per statement of :func:`history`: :data:`FIRST_PAGE` first, twice as many each page
after, at most this many (the walk ends at the channel's last snapshot, which LangGraph writes every 100
updates by default: a few pages read about what the walk needs, never more than twice that)."""

CHAIN_SQL = """WITH RECURSIVE chain(tid, ns, checkpoint_id, parent_id, body, epoch, depth) AS (
    SELECT c.tid, c.ns, c.checkpoint_id, c.parent_id, c.body, t.epoch, 0
    FROM remem_cp_checkpoints c JOIN remem_cp_threads t ON t.tid = c.tid
    WHERE t.thread_id = ? AND c.ns = ? AND c.checkpoint_id = ?
  UNION ALL
    SELECT c.tid, c.ns, c.checkpoint_id, c.parent_id, c.body, chain.epoch, chain.depth + 1
    FROM chain JOIN remem_cp_checkpoints c
        ON c.tid = chain.tid AND c.ns = chain.ns AND c.checkpoint_id = chain.parent_id
    WHERE chain.depth < ? AND chain.checkpoint_id <> ?)
SELECT tid, checkpoint_id, parent_id, body, epoch FROM chain ORDER BY depth"""
"""A checkpoint and its ancestors, nearest first: at most the given count of them, and none past the
checkpoint named last (the one a kept :class:`~._cache.Replay` is of; a parent chain made a cycle by a
re-put ends at the count too)."""

_CHAIN_CTE = CHAIN_SQL.rsplit("\n", 1)[0]
CHAIN_WITH_WRITES_SQL = f"""{_CHAIN_CTE}{{counts}}
SELECT r.tid, r.checkpoint_id, r.parent_id, r.body, r.epoch, w.*{{counted}}
FROM chain r CROSS JOIN LATERAL (SELECT array_agg(checkpoint_id), array_agg(task_id), array_agg(idx),
    array_agg(channel), array_agg(task_path), array_agg(value) FROM remem_cp_writes w
    WHERE w.tid = r.tid AND w.ns = r.ns AND w.checkpoint_id = r.checkpoint_id) w{{joined}}
ORDER BY r.depth"""
_COUNTS_CTE = """,
head AS (SELECT tid, ns FROM chain WHERE depth = 0),
counts AS (SELECT
    (SELECT count(*) FROM remem_cp_writes x JOIN head ON x.tid = head.tid AND x.ns = head.ns
        WHERE x.checkpoint_id BETWEEN ? AND ?) AS kept,
    (SELECT count(*) FROM remem_cp_writes x JOIN head ON x.tid = head.tid AND x.ns = head.ns
        WHERE x.checkpoint_id BETWEEN least(?, (SELECT min(checkpoint_id) FROM chain WHERE depth > 0))
            AND greatest(?, (SELECT max(checkpoint_id) FROM chain WHERE depth > 0))) AS whole,
    (SELECT count(*) FROM remem_cp_writes x JOIN head ON x.tid = head.tid AND x.ns = head.ns
        WHERE x.checkpoint_id BETWEEN (SELECT min(checkpoint_id) FROM chain WHERE depth > 0)
            AND (SELECT max(checkpoint_id) FROM chain WHERE depth > 0)) AS page)"""
CHAIN_WRITES_SQL = CHAIN_WITH_WRITES_SQL.format(counts="", counted="", joined="")
CHAIN_WRITES_COUNTS_SQL = CHAIN_WITH_WRITES_SQL.format(
    counts=_COUNTS_CTE, counted=", counts.kept, counts.whole, counts.page", joined=" CROSS JOIN counts"
)
"""PostgreSQL: :data:`CHAIN_SQL` with each ancestor's pending writes as arrays of their columns, and (the
first page of a walk that may go on from a kept :class:`~._cache.Replay`) the pending writes under the
kept span, under it widened to the ancestors read, and under the ancestors' span alone: a turn's history in one statement, whose snapshot
the check and the rows share (SQLite runs the three statements, in process)."""

_SPAN = "(SELECT count(*) FROM remem_cp_writes WHERE tid = ? AND ns = ? AND checkpoint_id BETWEEN ? AND ?)"
COUNT_SQL = f"SELECT {_SPAN}"
COUNT_TWO_SQL = f"SELECT {_SPAN}, {_SPAN}"
"""Pending writes stored under the ids of one span, or of two (what a :class:`~._cache.Replay` checks)."""


def _span_count(ctx: Context, tid: int, ns: str, *spans: tuple[str, str] | None) -> Program[list[int]]:
    """The pending writes stored under each span's ids (0 for None), in one statement."""
    given = [s for s in spans if s is not None]
    if not given:
        return [0 for _ in spans]
    params = tuple(x for s in given for x in (tid, ns, *s))
    ((*counts,),) = yield ctx.q(COUNT_SQL if len(given) == 1 else COUNT_TWO_SQL, params)
    found = iter(int(c) for c in counts)
    return [next(found) if s is not None else 0 for s in spans]


def _widen(span: tuple[str, str] | None, low: str, high: str) -> tuple[str, str]:
    return (low, high) if span is None else (min(span[0], low), max(span[1], high))


def one_statement(ctx: Context, config: RunnableConfig, channels: Sequence[str]) -> bool:
    """Whether :func:`history` of ``config`` is run outside a snapshot, as one statement: on PostgreSQL,
    when a kept history of the thread's namespace may be gone on from (its values then usually come from
    the caches). Any other read runs in one ``REPEATABLE READ`` transaction."""
    if ctx.dialect.name != "postgres":
        return False
    conf = config["configurable"]
    kept = ctx.cache.replay(thread_id_of(conf), str(conf.get("checkpoint_ns", "")))
    return kept is not None and kept.span is not None and set(channels) <= kept.channels.keys()


def history(
    ctx: Context, tx: Tx, config: RunnableConfig, channels: Sequence[str]
) -> Program[dict[str, DeltaChannelHistory]]:
    """``BaseCheckpointSaver.get_delta_channel_history`` for ``config`` (with a checkpoint id): the same
    result, its walk stopped at a checkpoint seen before (a re-put that made the parent chain a cycle
    would loop forever in the base class's walk), and at the checkpoint of the kept
    :class:`~._cache.Replay` when it is still good (see the module).

    Outside a snapshot (``tx.snapshot`` False, :func:`one_statement`) a read that needs a second
    statement raises :class:`~remem.errors.StaleCacheError` before making it: the saver runs it again in
    a snapshot (two statements outside one could straddle another process's write)."""
    program = _history(ctx, tx, config, channels)
    return (yield from (program if tx.snapshot else _alone(program)))


def _alone(program: Program[T]) -> Program[T]:
    """``program``, stopped at its second statement with :class:`~remem.errors.StaleCacheError`."""
    try:
        statement = next(program)
    except StopIteration as done:
        return cast("T", done.value)
    rows = yield statement
    try:
        program.send(rows)
    except StopIteration as done:
        return cast("T", done.value)
    program.close()
    raise StaleCacheError("a history read outside a snapshot needs a second statement")


def _history(
    ctx: Context, tx: Tx, config: RunnableConfig, channels: Sequence[str]
) -> Program[dict[str, DeltaChannelHistory]]:
    conf = config["configurable"]
    thread_id, ns = thread_id_of(conf), str(conf.get("checkpoint_ns", ""))
    known, watch = ctx.cache.watch(thread_id, ns)
    if known is not None and not set(channels) <= known.channels.keys():
        known = None
    found = yield from _walk(ctx, config, channels, known)
    if found is not None and found[3] and known is not None and watch.spoiled(known):
        # A put through this saver wrote one of the checkpoints the kept histories were read from again
        # while this read ran: they may not be what this read's snapshot holds, so it reads them anew.
        found = yield from _walk(ctx, config, channels, None)
    if found is None:
        return {ch: {"writes": []} for ch in dict.fromkeys(channels)}  # no such checkpoint
    tid, stored, replay, _ = found
    if replay is not None:
        tx.after_commit.append(functools.partial(_keep, ctx, thread_id, ns, replay, watch))
    return (yield from _result(ctx, tid, channels, stored))


def _keep(ctx: Context, thread_id: str, ns: str, replay: Replay, watch: Watch) -> None:
    ctx.cache.set_replay(thread_id, ns, replay, watch)


_Walked = tuple[int, dict[str, tuple[Any, tuple[StoredWrite, ...]]], "Replay | None", bool]
"""What :func:`_walk` found: the thread's tid, the histories as stored, the :class:`~._cache.Replay` to
keep (None: the one kept was still good), and whether the kept one was used."""


def _walk(
    ctx: Context, config: RunnableConfig, channels: Sequence[str], known: Replay | None
) -> Program[_Walked | None]:
    """The histories of :func:`history` as stored (None: no such checkpoint), going on from ``known``
    where it is still good."""
    conf = config["configurable"]
    thread_id, ns = thread_id_of(conf), str(conf.get("checkpoint_ns", ""))
    target = _ids.stored(str(conf["checkpoint_id"]))
    used = False
    stop = _ids.stored(known.checkpoint_id) if known is not None else ""
    remaining = list(dict.fromkeys(channels))
    collected: dict[str, list[StoredWrite]] = {ch: [] for ch in remaining}  # newest first
    seeds: dict[str, Any] = {}
    names: dict[int, str] = {}
    seen = {target}
    span: tuple[str, str] | None = None  # of the ancestors read here
    counted: int | None = None  # the pending writes under ``span``, once counted
    page: tuple[tuple[str, str], int] | None = None  # the first page's ancestors' span, and its count
    tid = epoch = -1
    cursor: str | None = target
    depth = FIRST_PAGE
    folded = ctx.dialect.name == "postgres"
    while cursor is not None and remaining:
        params: tuple[Any, ...] = (thread_id, ns, cursor, depth, stop)
        counts = folded and tid < 0 and known is not None and known.span is not None
        if counts:
            assert known is not None and known.span is not None
            params += (*known.span, *known.span)
        text = (CHAIN_WRITES_COUNTS_SQL if counts else CHAIN_WRITES_SQL) if folded else CHAIN_SQL
        raw = yield ctx.q(text, params)
        depth = min(2 * depth, ANCESTORS)
        # (kept, whole): the pending writes under the kept span, and under it widened to this page's ancestors
        precounted = (int(raw[0][11]), int(raw[0][12])) if counts and raw else None
        if counts and len(raw) > 1:  # the ancestors' span, for a walk that ends on this page
            page = ((min(r[1] for r in raw[1:]), max(r[1] for r in raw[1:])), int(raw[0][13]))
        if tid < 0:  # the first page: the checkpoint itself, then its ancestors
            if not raw:
                return None
            tid, epoch = raw[0][0], raw[0][4]
            if known is not None and (known.tid, known.epoch) != (tid, epoch):
                known, stop = None, ""
            if known is not None:
                names.update(known.names)
            if known is not None and target == stop:
                (count,) = (
                    precounted[:1]
                    if precounted is not None
                    else (yield from _span_count(ctx, tid, ns, known.span))
                )
                if count == known.writes:
                    return tid, dict(known.channels), None, True
                known, stop = None, ""
            cursor, raw = raw[0][2], raw[1:]
            if not raw:
                continue  # the next page starts at the parent
        elif not raw:
            break  # an ancestor is gone
        rows = [(r[1], r[2], codec.decode_body(bytes(r[3]))) for r in raw]
        if folded:
            found: Any = [w for r in raw if r[5] is not None for w in zip(*r[5:11], strict=True)]
        else:
            found = yield ctx.q(
                ctx.dialect.writes_in(), (tid, ns, ctx.dialect.list_param([r[0] for r in rows]))
            )
        writes: dict[str, list[tuple[Any, ...]]] = {}
        for cid, task_id, idx, channel, path, packed in found:
            writes.setdefault(cid, []).append((path, task_id, idx, channel, packed))
        wanted = {n for _, _, b in rows for n in b.descriptors} | {
            n for ws in writes.values() for w in ws for n in (w[0], w[3])
        }
        wanted -= names.keys()
        if wanted:
            held = yield from load_payloads(ctx, tid, wanted)
            names.update({n: str(ctx.serde.loads_typed(held[n])) for n in wanted})
        for cid, parent, body in rows:
            if not remaining:
                break
            if cid != cursor or cid in seen:
                cursor = None  # a cycle: the walk ends (the base class's would go round it)
                break
            seen.add(cid)
            span = _widen(span, cid, cid)
            own = sorted(
                ((names[p], _ids.shown(t), i, names[c], v) for p, t, i, c, v in writes.get(cid, ())),
                key=lambda w: writes_sort_key(w[0], w[1], w[2]),
            )
            for _, task_id, _, ch, packed in reversed(own):
                if ch in remaining:
                    collected[ch].append((task_id, ch, ormsgpack.unpackb(bytes(packed))))
            stored = {names[n]: d for n, d in body.descriptors.items()}
            for ch in [c for c in remaining if c in stored]:
                seeds[ch] = stored[ch]
                remaining.remove(ch)
            cursor = parent
            if known is not None and cid == stop:
                # The kept histories go on from here, if nothing they were read from changed since.
                whole = span if known.span is None else _widen(span, *known.span)
                # a stop on the first page ends it: the statement's widened span is this one
                count, now = (
                    precounted
                    if precounted is not None
                    else (yield from _span_count(ctx, tid, ns, known.span, whole))
                )
                if count == known.writes:
                    for ch in remaining:
                        seed, older = known.channels[ch]
                        if seed is not None:
                            seeds[ch] = seed
                        collected[ch].extend(reversed(older))
                    remaining = []
                    span, counted, used = whole, now, True
                known, stop = None, ""
                break
    result = {ch: (seeds.get(ch), tuple(reversed(collected[ch]))) for ch in collected}
    if (
        counted is None
        and page is not None
        and span is not None
        and page[0][0] <= span[0] <= span[1] <= page[0][1]
    ):
        # The walk ended on its first page: the page's span is counted already (a wider span than the
        # walk read holds the histories too, and is checked as well).
        span, counted = page
    if counted is None:
        (counted,) = yield from _span_count(ctx, tid, ns, span)
    return tid, result, Replay(str(conf["checkpoint_id"]), tid, epoch, span, counted, result, names), used


def _result(
    ctx: Context, tid: int, channels: Sequence[str], stored: Any
) -> Program[dict[str, DeltaChannelHistory]]:
    """The histories of ``stored`` (a :attr:`~._cache.Replay.channels`), their values read."""
    descs: list[Any] = []
    for ch in channels:
        seed, writes = stored[ch]
        descs.extend(w[2] for w in writes)
        if seed is not None:
            descs.append(seed)
    values = iter((yield from _read.values_of(ctx, tid, descs)))
    out: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        seed, writes = stored[ch]
        entry: DeltaChannelHistory = {"writes": [(w[0], w[1], next(values)) for w in writes]}
        if seed is not None:
            entry["seed"] = next(values)
        out[ch] = entry
    return out


_Key = tuple[str, str, str]
_NO_SEED = object()


def _key(config: RunnableConfig) -> _Key:
    conf = config["configurable"]
    return (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), str(conf["checkpoint_id"]))


def _fresh(seed: Any) -> Any:
    """A seed in a new container: the listing's tuple holds the same one, and a reducer may extend what
    it is given in place."""
    value = getattr(seed, "value", None)
    if type(value) in (list, dict, set) and hasattr(seed, "_replace"):
        return seed._replace(value=copy.copy(value))
    return copy.copy(seed) if type(seed) in (list, dict, set) else seed


_Node = tuple[dict[str, Any], list[PendingWrite], "_Key | None"]
"""A listed checkpoint as a history needs it: its channel values, its pending writes, its parent's key
(no config or tuple: a listing holds nothing that holds it)."""


class _Listing:
    """The checkpoints of one ``list()`` call by key, and the channel histories worked out from them."""

    def __init__(self) -> None:
        self.nodes: dict[_Key, _Node] = {}
        self.threads: set[str] = set()
        self._known: dict[tuple[_Key, str], tuple[Any, list[PendingWrite]]] = {}

    def add(self, tup: CheckpointTuple) -> None:
        parent = None if tup.parent_config is None else _key(tup.parent_config)
        self.nodes[_key(tup.config)] = (
            tup.checkpoint["channel_values"],
            list(tup.pending_writes or ()),
            parent,
        )
        self.threads.add(str(tup.config["configurable"]["thread_id"]))

    def drop(self) -> None:
        """Forget everything: what was listed changed (the configs that hold this listing read anew)."""
        self.nodes.clear()
        self._known.clear()

    def history(self, key: _Key, channels: Sequence[str]) -> dict[str, DeltaChannelHistory] | None:
        """What :func:`walk` returns for the checkpoint ``key``, or None when its ancestors leave the listing."""
        if key not in self.nodes:
            return None
        found: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            one = self._one(key, ch)
            if one is None:
                return None
            seed, writes = one
            entry: DeltaChannelHistory = {"writes": list(writes)}
            if seed is not _NO_SEED:
                entry["seed"] = _fresh(seed)
            found[ch] = entry
        return found

    def _one(self, key: _Key, ch: str) -> tuple[Any, list[PendingWrite]] | None:
        # Climb to a checkpoint whose history is known or ends at its parent, then work back down: each
        # history is its parent's plus the parent's writes, unless the parent holds the seed.
        climbed: list[tuple[_Key, _Node]] = []
        seen: set[_Key] = set()
        cur = key
        while True:
            if cur in seen:
                return None  # a cycle: the walk's own rule decides
            seen.add(cur)
            known = self._known.get((cur, ch))
            if known is not None:
                break
            parent_key = self.nodes[cur][2]
            if parent_key is None:
                known = (_NO_SEED, [])
                break
            parent = self.nodes.get(parent_key)
            if parent is None:
                return None
            if ch in parent[0]:
                known = (parent[0][ch], _writes_of(parent[1], ch))
                break
            climbed.append((cur, parent))
            cur = parent_key
        self._known[(cur, ch)] = known
        for child, parent in reversed(climbed):
            known = (known[0], known[1] + _writes_of(parent[1], ch))
            self._known[(child, ch)] = known
        return known


def _writes_of(writes: Sequence[PendingWrite], ch: str) -> list[PendingWrite]:
    return [w for w in writes if w[1] == ch]


class ListedConfig(dict[str, Any]):
    """A listed tuple's config: a plain config that holds the listing it came from, so the listing lives
    as long as its caller keeps any of its tuples. A copy or a pickle of it is a plain dict."""

    __slots__ = ("listing",)

    def __init__(self, config: RunnableConfig, listing: _Listing) -> None:
        super().__init__(config)
        self.listing = listing

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class Shared(dict[int, dict[int, Any]]):
    """The values one ``list()`` call's pages share (``_read``'s ``shared``), as an object a weak reference
    can name: its pages' tuples go to one listing while the call runs."""

    __slots__ = ("__weakref__",)


def replayed(tuples: Sequence[CheckpointTuple]) -> bool:
    """Whether any of ``tuples`` is of a thread with a ``DeltaChannel`` (its counters in the metadata, or a
    snapshot in the values): only such a listing is kept, so a plain graph's is never held on to."""
    return any(
        "counters_since_delta_snapshot" in (t.metadata or {})
        or any(type(v) is SNAPSHOT for v in t.checkpoint["channel_values"].values())  # never None's type
        for t in tuples
    )


class Listings:
    """The saver's live listings (weakly: each is held by the configs it listed, see the module), and the
    one each running ``list()`` call adds its pages to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, tuple[weakref.ref[Shared], _Listing]] = {}
        self._live: weakref.WeakSet[_Listing] = weakref.WeakSet()

    def add(self, owner: Shared, tuples: Sequence[CheckpointTuple]) -> list[CheckpointTuple]:
        """``tuples``, one page of the listing ``owner`` stands for, kept; returned with configs that hold it."""
        with self._lock:
            held = self._running.get(id(owner))
            if held is None or held[0]() is not owner:
                held = (weakref.ref(owner, functools.partial(self._ended, id(owner))), _Listing())
                self._running[id(owner)] = held
                self._live.add(held[1])
            listing = held[1]
            for tup in tuples:
                listing.add(tup)
        return [
            tup._replace(config=cast("RunnableConfig", ListedConfig(tup.config, listing))) for tup in tuples
        ]

    def _ended(self, key: int, ref: weakref.ref[Shared]) -> None:
        # A list() call ended: its listing lives on in its configs only. No lock: this may run in gc,
        # inside add(); each dict operation is atomic.
        held = self._running.get(key)
        if held is not None and held[0] is ref:
            self._running.pop(key, None)

    def live(self) -> list[_Listing]:
        """The listings some caller still holds a tuple of."""
        return list(self._live)

    def history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory] | None:
        """The history of a listed tuple's config from its listing; None for any other config."""
        listing = config.listing if type(config) is ListedConfig else None
        if listing is None:
            return None
        with self._lock:
            return listing.history(_key(config), channels)

    def forget(self, thread_id: str | None = None) -> None:
        """Drop the listings that hold ``thread_id`` (every listing when None): it was written."""
        with self._lock:
            for listing in list(self._live):
                if thread_id is None or thread_id in listing.threads:
                    listing.drop()
            for key, (_, listing) in list(self._running.items()):
                if not listing.nodes:  # a running call's next pages start a new listing
                    del self._running[key]
