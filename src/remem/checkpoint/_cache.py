"""What a saver remembers between calls: each thread's item digests, rebuilt lists, the last checkpoint,
the last DeltaChannel history it read (:class:`Replay`).

Everything here is a cache of committed rows, so it is only ever filled from the database or after a
commit. A thread's digests are valid for one ``(tid, epoch)``: deleting or pruning a thread changes one
of them, and a stale cache is then dropped instead of pointing at removed rows.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remem.checkpoint import _ids as ids

__all__ = ["Head", "Replay", "SaverCache", "ThreadDigests", "Watch"]


WRITE_STRIPES = 64


def stripe(thread_id: str) -> int:
    """Which of :data:`WRITE_STRIPES` write locks guards ``thread_id``."""
    return hash(thread_id) % WRITE_STRIPES


@dataclass
class ThreadDigests:
    """The digest -> item number map of one thread, complete up to ``next_item``."""

    tid: int
    thread_id: str
    epoch: int
    next_item: int = 0
    digests: dict[bytes, int] = field(default_factory=dict)
    next_list: int = -1
    """The thread's list counter as this saver's last write left it (-1: not known); with ``next_item``,
    what a PostgreSQL write assumes in its one round trip, guarded in the database."""
    bases: tuple[tuple[int, bytes], ...] = ()
    """(item number, data) of the last items this saver's writes stored whole: what a new item may be
    compressed after (:func:`~._codec.item_blob`); valid for this ``epoch`` only, as the digests are."""


@dataclass(frozen=True)
class Head:
    """The last checkpoint seen of a (thread, namespace): a put's parent is usually this one.

    Only valid for the thread's ``epoch`` it was read at: a prune in another process may since have
    deleted values it refers to.
    """

    checkpoint_id: str
    epoch: int
    versions: Mapping[int, Any]
    """Channel versions by the item number of the channel's name."""
    descriptors: Mapping[int, Any]


StoredWrite = tuple[str, str, Any]
"""(task id, channel, value descriptor) of a pending write, as a history returns it but unread."""


@dataclass(frozen=True)
class Replay:
    """The DeltaChannel histories of one checkpoint as stored (descriptors: no value is held), and what
    tells whether the database still gives them (see :func:`~._delta.history`).

    A history depends on the checkpoints between its seed and the checkpoint's parent and on their
    pending writes. Checkpoints are never changed in place and writes are only ever added (a prune or a
    delete moves the thread's ``epoch`` or ``tid``), so the histories hold while ``(tid, epoch)`` and the
    count of pending writes stored under ids in ``span`` are what they were when read."""

    checkpoint_id: str
    tid: int
    epoch: int
    span: tuple[str, str] | None
    """The lowest and highest stored id of the checkpoints the histories were read from (None: none)."""
    writes: int
    """Pending writes stored under ids in ``span`` (any checkpoint's: a fork's too) when it was read."""
    channels: Mapping[str, tuple[Any, tuple[StoredWrite, ...]]]
    """Per channel: the seed's descriptor (None: no seed) and the writes after it, oldest first."""
    names: Mapping[int, str]
    """The channel and task path names met, by item number (an item number of a thread never changes)."""

    def read_from(self, stored_id: str) -> bool:
        """Whether a put of the checkpoint ``stored_id`` (its stored id) may write again one that these
        histories depend on: the checkpoint they are of, or one in ``span`` (a new checkpoint's id is past
        them)."""
        return stored_id == ids.stored(self.checkpoint_id) or (
            self.span is not None and self.span[0] <= stored_id <= self.span[1]
        )


class Watch:
    """One running history read of a (thread, namespace) (:meth:`SaverCache.watch`): the stored ids of the
    checkpoints this saver's puts wrote to it while the read ran, which tell whether what the read used
    or found may be stale. Held weakly by the cache: a read that never ends leaves nothing behind."""

    __slots__ = ("__weakref__", "key", "puts")

    def __init__(self, key: tuple[str, str]) -> None:
        self.key = key
        self.puts: list[str] = []

    def spoiled(self, replay: Replay) -> bool:
        """Whether a put during the read may have written a checkpoint ``replay`` depends on."""
        return any(replay.read_from(p) for p in self.puts)


class SaverCache:
    """Bounded, thread-safe caches shared by all calls of one saver."""

    def __init__(
        self, *, max_threads: int = 64, max_lists: int = 4096, max_payload_bytes: int = 64 << 20
    ) -> None:
        self._lock = threading.Lock()
        self._payloads: OrderedDict[tuple[int, int], tuple[str, bytes]] = OrderedDict()
        self._payload_bytes = 0
        self._max_payload_bytes = max_payload_bytes
        self._threads: OrderedDict[int, ThreadDigests] = OrderedDict()
        self._lists: OrderedDict[tuple[int, int], tuple[tuple[int, ...], int]] = OrderedDict()
        self._heads: OrderedDict[tuple[int, str], Head] = OrderedDict()
        self._replays: OrderedDict[tuple[str, str], Replay] = OrderedDict()
        self._watches: weakref.WeakSet[Watch] = weakref.WeakSet()
        self._putting: dict[tuple[str, str], list[str]] = {}
        """The stored ids of the checkpoints this saver's puts under way write, by (thread, namespace)."""
        self._max_threads = max_threads
        self._max_lists = max_lists
        self._write_locks = [threading.Lock() for _ in range(WRITE_STRIPES)]

    def write_lock(self, thread_id: str) -> threading.Lock:
        """Held by this saver's writes to ``thread_id`` from their first statement built to their commit
        recorded, so that each starts from what the last one left (the database orders a thread's writes
        anyway: its row is locked by each). One of :data:`WRITE_STRIPES` locks, never one for the saver."""
        return self._write_locks[stripe(thread_id)]

    def digests(self, tid: int, thread_id: str, epoch: int) -> ThreadDigests:
        """The thread's digest map, new and empty unless one for this exact (tid, thread, epoch) is held."""
        with self._lock:
            known = self._threads.get(tid)
            if known is None or known.epoch != epoch or known.thread_id != thread_id:
                known = ThreadDigests(tid, thread_id, epoch)
                self._threads[tid] = known
            self._threads.move_to_end(tid)
            while len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)
            return known

    def thread_named(self, thread_id: str) -> ThreadDigests | None:
        """The digest map held for ``thread_id``, if any (its epoch unchecked: a write's guard checks it); the
        most recently used, so a thread deleted and made again elsewhere (a new tid) is not shadowed by the old."""
        with self._lock:
            return next((t for t in reversed(self._threads.values()) if t.thread_id == thread_id), None)

    def add_digests(self, state: ThreadDigests, rows: Iterable[tuple[bytes, int]], next_item: int) -> None:
        """Record committed items (digest, number); the map is then complete up to ``next_item``."""
        with self._lock:
            for digest, no in rows:
                state.digests[bytes(digest)] = no
            state.next_item = max(state.next_item, next_item)

    def payloads(self, tid: int, item_nos: Iterable[int]) -> dict[int, tuple[str, bytes]]:
        """The serialized values held for these items (items never change, so these never go stale)."""
        out = {}
        with self._lock:
            for no in item_nos:
                hit = self._payloads.get((tid, no))
                if hit is not None:
                    self._payloads.move_to_end((tid, no))
                    out[no] = hit
        return out

    def put_payloads(self, tid: int, payloads: Mapping[int, tuple[str, bytes]]) -> None:
        """Keep the payloads of a read, unless they pass a quarter of the cache: a long thread's list (a
        100,000-message state is tens of MB) would push out every other thread's values and stay in memory
        beside its decoded objects, for a read that the next turn makes again anyway."""
        if sum(len(data) for _, data in payloads.values()) > self._max_payload_bytes // 4:
            return
        with self._lock:
            for no, payload in payloads.items():
                if (tid, no) not in self._payloads:
                    self._payloads[(tid, no)] = payload
                    self._payload_bytes += len(payload[1])
            while self._payload_bytes > self._max_payload_bytes and self._payloads:
                _, (_, data) = self._payloads.popitem(last=False)
                self._payload_bytes -= len(data)

    def list_refs(self, tid: int, list_no: int) -> tuple[tuple[int, ...], int] | None:
        with self._lock:
            hit = self._lists.get((tid, list_no))
            if hit is not None:
                self._lists.move_to_end((tid, list_no))
            return hit

    def put_lists(self, tid: int, lists: Mapping[int, tuple[tuple[int, ...], int]]) -> None:
        with self._lock:
            for no, entry in lists.items():
                self._lists[(tid, no)] = entry
                self._lists.move_to_end((tid, no))
            while len(self._lists) > self._max_lists:
                self._lists.popitem(last=False)

    def head(self, tid: int, ns: str) -> Head | None:
        with self._lock:
            return self._heads.get((tid, ns))

    def set_head(self, tid: int, ns: str, head: Head) -> None:
        with self._lock:
            self._heads[(tid, ns)] = head
            self._heads.move_to_end((tid, ns))
            while len(self._heads) > self._max_threads * 4:
                self._heads.popitem(last=False)

    def replay(self, thread_id: str, ns: str) -> Replay | None:
        """The last history read of the (thread, namespace), if any (unchecked: its reader checks it)."""
        with self._lock:
            return self._replays.get((thread_id, ns))

    def watch(self, thread_id: str, ns: str) -> tuple[Replay | None, Watch]:
        """A history read begins: the kept history it may go on from (None while a put that may write one
        of its checkpoints again is under way, :meth:`begin_put`), and the
        :class:`Watch` that collects the puts made while it runs."""
        key = (thread_id, ns)
        watch = Watch(key)
        with self._lock:
            self._watches.add(watch)
            replay = self._replays.get(key)
            if replay is not None and self._put_under_way(key, replay):
                replay = None
            return replay, watch

    def set_replay(self, thread_id: str, ns: str, replay: Replay, watch: Watch | None = None) -> bool:
        """Keep ``replay`` as the (thread, namespace)'s last history: one per thread, as many threads as
        heads. Not kept (False) when ``watch``, the read that found it, saw a put that may have written one
        of its checkpoints again, or while such a put is under way: the read may have seen the rows from
        before it, and would then hide the new ones from every later read."""
        key = (thread_id, ns)
        with self._lock:
            if watch is not None:
                self._watches.discard(watch)
                if self._put_under_way(key, replay) or watch.spoiled(replay):
                    return False
            self._replays[key] = replay
            self._replays.move_to_end(key)
            while len(self._replays) > self._max_threads * 4:
                self._replays.popitem(last=False)
            return True

    def begin_put(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Before this saver's put of ``checkpoint_id`` starts: drops the (thread, namespace)'s history if
        the put may write one of the checkpoints it was read from again (see :class:`Replay`), and, until
        :meth:`end_put`, no history such a put may write again is handed out or kept. Every :meth:`begin_put` has its
        :meth:`end_put`, after the put's commit or its failure."""
        with self._lock:
            self._putting.setdefault((thread_id, ns), []).append(ids.stored(checkpoint_id))
            self._noted(thread_id, ns, ids.stored(checkpoint_id))

    def end_put(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """After the put :meth:`begin_put` announced committed (or failed): what it wrote is now what
        the database gives, so a history read before it and kept meanwhile is dropped again, and the
        reads under way that may have seen the rows from before it keep nothing."""
        key = (thread_id, ns)
        with self._lock:
            under_way = self._putting.get(key, [])
            under_way.remove(ids.stored(checkpoint_id))
            if not under_way:
                self._putting.pop(key, None)
            self._noted(thread_id, ns, ids.stored(checkpoint_id))

    def _put_under_way(self, key: tuple[str, str], replay: Replay) -> bool:
        return any(replay.read_from(p) for p in self._putting.get(key, ()))

    def _noted(self, thread_id: str, ns: str, stored: str) -> None:
        key = (thread_id, ns)
        for watch in list(self._watches):
            if watch.key == key:
                watch.puts.append(stored)
        replay = self._replays.get(key)
        if replay is not None and replay.read_from(stored):
            del self._replays[key]

    def forget(self, tid: int) -> None:
        """Drop all that is known of a thread (after it was deleted, pruned or rewritten)."""
        with self._lock:
            self._threads.pop(tid, None)
            for key in [k for k in self._lists if k[0] == tid]:
                del self._lists[key]
            for hkey in [k for k in self._heads if k[0] == tid]:
                del self._heads[hkey]
            for rkey in [k for k, r in self._replays.items() if r.tid == tid]:
                del self._replays[rkey]
