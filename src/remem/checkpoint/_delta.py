"""``get_delta_channel_history`` without one read per ancestor, and in ``get_state_history`` without any.

A ``DeltaChannel`` stores its value only every so many updates (a ``_DeltaSnapshot``); LangGraph rebuilds
it at any other checkpoint from the nearest snapshot above it and the writes on the way, which it asks
the saver for (the base class walks the parents one ``get_tuple`` each). Two ways in here, one result:

- :func:`ancestors` reads a checkpoint's ancestors a page at a time (one recursive statement, then the
  page's writes and items), which :func:`walk` steps through: ``get_state`` and time travel.
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
from collections.abc import Generator, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, PendingWrite

from remem._statements import Program
from remem.checkpoint import _ids, _read
from remem.checkpoint._ops import Context, thread_id_of
from remem.checkpoint._snapshot import SNAPSHOT

__all__ = ["ANCESTORS", "FIRST_PAGE", "ListedConfig", "Listings", "Shared", "ancestors", "replayed", "walk"]

FIRST_PAGE = 16
ANCESTORS = 256
"""Ancestors read per statement of :func:`ancestors`: :data:`FIRST_PAGE` first, twice as many each page
after, at most this many (the walk ends at the channel's last snapshot, which LangGraph writes every 100
updates by default: a few pages read about what the walk needs, never more than twice that)."""

_COLUMNS = "thread_id, tid, ns, checkpoint_id, parent_id, body, metadata, epoch"
ANCESTORS_SQL = f"""WITH RECURSIVE chain({_COLUMNS}, depth) AS (
    SELECT t.thread_id, c.tid, c.ns, c.checkpoint_id, c.parent_id, c.body, c.metadata, t.epoch, 0
    FROM remem_cp_checkpoints c JOIN remem_cp_threads t ON t.tid = c.tid
    WHERE t.thread_id = ? AND c.ns = ? AND c.checkpoint_id = ?
  UNION ALL
    SELECT chain.thread_id, c.tid, c.ns, c.checkpoint_id, c.parent_id, c.body, c.metadata, chain.epoch,
        chain.depth + 1
    FROM chain JOIN remem_cp_checkpoints c
        ON c.tid = chain.tid AND c.ns = chain.ns AND c.checkpoint_id = chain.parent_id
    WHERE chain.depth < ?)
SELECT {_COLUMNS} FROM chain ORDER BY depth"""
"""A checkpoint and its ancestors, nearest first, at most :data:`ANCESTORS` of them (a parent chain
made a cycle by a re-put ends there too)."""


def ancestors(
    ctx: Context, config: RunnableConfig, shared: dict[int, dict[int, Any]], depth: int = ANCESTORS
) -> Program[list[CheckpointTuple]]:
    """The checkpoint ``config`` names (with a checkpoint id) and its ``depth`` nearest ancestors, as tuples."""
    conf = config["configurable"]
    ns = str(conf.get("checkpoint_ns", ""))
    params = (thread_id_of(conf), ns, _ids.stored(str(conf["checkpoint_id"])), depth)
    raw = yield ctx.q(ANCESTORS_SQL, params)
    rows = _read.rows_of(ctx, raw)
    if not rows:
        return []
    return (yield from _read.materialize(ctx, rows, shared))


Walk = Generator[RunnableConfig, CheckpointTuple | None, dict[str, DeltaChannelHistory]]


def walk(config: RunnableConfig, channels: Sequence[str]) -> Walk:
    """``BaseCheckpointSaver.get_delta_channel_history``'s walk (same result), as a program that yields
    the config of each checkpoint to read and is sent its tuple; a checkpoint met twice ends it."""
    found: dict[str, DeltaChannelHistory] = {}
    if not channels:
        return found
    collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    target = yield config
    cursor = target.parent_config if target else None
    seen = {target.checkpoint["id"]} if target else set()
    while cursor is not None and remaining:
        tup = yield cursor
        if tup is None or tup.checkpoint["id"] in seen:
            break
        seen.add(tup.checkpoint["id"])
        for write in reversed(tup.pending_writes or ()):
            if write[1] in remaining:
                collected[write[1]].append(write)
        for ch in [c for c in remaining if c in tup.checkpoint["channel_values"]]:
            seeds[ch] = tup.checkpoint["channel_values"][ch]
            remaining.discard(ch)
        cursor = tup.parent_config
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        found[ch] = entry
    return found


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
