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
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Generator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, PendingWrite
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from remem._statements import Program
from remem.checkpoint import _ids, _read
from remem.checkpoint._ops import Context, thread_id_of

__all__ = ["ANCESTORS", "FIRST_PAGE", "Listings", "ancestors", "replayed", "walk"]

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


class _Listing:
    """The tuples of one ``list()`` call by checkpoint, and the channel histories worked out from them."""

    def __init__(self) -> None:
        self.tuples: dict[_Key, CheckpointTuple] = {}
        self.threads: set[str] = set()
        self._known: dict[tuple[_Key, str], tuple[Any, list[PendingWrite]]] = {}

    def history(self, tup: CheckpointTuple, channels: Sequence[str]) -> dict[str, DeltaChannelHistory] | None:
        """What :func:`walk` returns for ``tup``, or None when its ancestors leave the listing."""
        found: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            one = self._one(tup, ch)
            if one is None:
                return None
            seed, writes = one
            entry: DeltaChannelHistory = {"writes": list(writes)}
            if seed is not _NO_SEED:
                entry["seed"] = _fresh(seed)
            found[ch] = entry
        return found

    def _one(self, tup: CheckpointTuple, ch: str) -> tuple[Any, list[PendingWrite]] | None:
        # Climb to a checkpoint whose history is known or ends at its parent, then work back down: each
        # history is its parent's plus the parent's writes, unless the parent holds the seed.
        climbed: list[tuple[_Key, CheckpointTuple]] = []
        seen: set[_Key] = set()
        cur = tup
        while True:
            key = _key(cur.config)
            if key in seen:
                return None  # a cycle: the walk's own rule decides
            seen.add(key)
            known = self._known.get((key, ch))
            if known is not None:
                break
            if cur.parent_config is None:
                known = (_NO_SEED, [])
                break
            parent = self.tuples.get(_key(cur.parent_config))
            if parent is None:
                return None
            if ch in parent.checkpoint["channel_values"]:
                known = (parent.checkpoint["channel_values"][ch], _writes_to(parent, ch))
                break
            climbed.append((key, parent))
            cur = parent
        self._known[(key, ch)] = known
        for child, parent in reversed(climbed):
            known = (known[0], known[1] + _writes_to(parent, ch))
            self._known[(child, ch)] = known
        return known


def _writes_to(tup: CheckpointTuple, ch: str) -> list[PendingWrite]:
    return [w for w in tup.pending_writes or () if w[1] == ch]


def replayed(tuples: Sequence[CheckpointTuple]) -> bool:
    """Whether any of ``tuples`` is of a thread with a ``DeltaChannel`` (its counters in the metadata, or a
    snapshot in the values): only such a listing is kept, so a plain graph's is never held on to."""
    return any(
        "counters_since_delta_snapshot" in (t.metadata or {})
        or any(type(v) is _DeltaSnapshot for v in t.checkpoint["channel_values"].values())
        for t in tuples
    )


class Listings:
    """The saver's recent ``list()`` calls (at most :attr:`KEEP`), found by the identity of a listed
    tuple's config: only that object, handed back by LangGraph, is answered from its listing."""

    KEEP = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listings: OrderedDict[int, tuple[object, _Listing]] = OrderedDict()
        self._configs: dict[int, tuple[RunnableConfig, _Listing]] = {}

    def add(self, owner: object, tuples: Sequence[CheckpointTuple]) -> None:
        """Keep ``tuples``, one page of the listing ``owner`` (an object that lives as long as it) stands for."""
        with self._lock:
            held = self._listings.get(id(owner))
            if held is None or held[0] is not owner:
                held = (owner, _Listing())
                self._listings[id(owner)] = held
                while len(self._listings) > self.KEEP:
                    self._drop(self._listings.popitem(last=False)[1][1])
            listing = held[1]
            for tup in tuples:
                listing.tuples[_key(tup.config)] = tup
                listing.threads.add(str(tup.config["configurable"]["thread_id"]))
                self._configs[id(tup.config)] = (tup.config, listing)

    def history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory] | None:
        """The history of a listed tuple's config from its listing; None for any other config."""
        with self._lock:
            held = self._configs.get(id(config))
            if held is None or held[0] is not config:
                return None
            listing = held[1]
            tup = listing.tuples.get(_key(config))
            return None if tup is None else listing.history(tup, channels)

    def forget(self, thread_id: str | None = None) -> None:
        """Drop the listings that hold ``thread_id`` (every listing when None): it was written."""
        with self._lock:
            if not self._listings:
                return
            for owner_id, (_, listing) in list(self._listings.items()):
                if thread_id is None or thread_id in listing.threads:
                    del self._listings[owner_id]
                    self._drop(listing)

    def _drop(self, listing: _Listing) -> None:
        for tup in listing.tuples.values():
            held = self._configs.get(id(tup.config))
            if held is not None and held[1] is listing:
                del self._configs[id(tup.config)]
