"""A process's matrix of a PostgreSQL store's exact vectors (a server without pgvector), kept fresh per
namespace by store schema v7's change counts.

Without it every search read every vector of the namespaces searched (a context card makes several
searches: at 100k messages, the thread's whole matrix several times a card). Now a search reads the
counts of its namespaces (a few rows, in the statement that replaced the vector read: no extra round
trip) and reads the vectors of a namespace only when it is not held yet or its count moved (another
writer changed it). The count is read before the vectors, so a change committed between the two makes
the next search read them again, never keeps a stale row. What this process writes reaches the matrix in
place: the write's own transaction reads the counts it moved (holding their row locks), and the matrix
takes the write only if the count was, before it, the one the matrix holds; otherwise that namespace is
dropped and read again when searched. A write's change (:class:`~remem.store._exec.VecChanged`) sets its
items' vectors to exactly what it lists, so taking it twice changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np

from remem.layout import STORE_VECTOR_CHANGES_TABLE
from remem.store._core import IndexPlan
from remem.store._exec import Hits, Program, Statement, VecChanged, Vector
from remem.store._schema import VECTORS
from remem.store._vectors import VectorMatrix, float_rows, id_column, with_rows

__all__ = ["RunCache", "VectorCache"]


class VectorCache:
    """One store's matrix and, for each namespace it holds, the change count its rows reflect. Shared by
    the store's threads and its async calls (a pool runs transactions side by side): a lock guards both."""

    def __init__(self, plan: IndexPlan) -> None:
        self.plan = plan
        self.matrix = VectorMatrix(plan.dims, metric=plan.distance, capacity=1)
        self.held: dict[int, int] = {}
        self.lock = threading.Lock()

    def run(self) -> RunCache:
        return RunCache(self)


class RunCache:
    """The cache as one transaction's program sees it: which namespaces it found fresh, and what its own
    writes moved (read before its commit, taken after it by :meth:`committed`)."""

    def __init__(self, cache: VectorCache) -> None:
        self.cache = cache
        self.fresh: dict[int, int] = {}
        self._moved: dict[int, tuple[int, bool]] | None = None

    def search(
        self, query: Vector, k: int, ns_ids: list[int] | None, item_ids: list[int] | None
    ) -> Program[Hits]:
        if item_ids is not None and ns_ids is None:
            return (yield from self._items(query, k, item_ids))
        counts = yield from _counts(ns_ids)
        wanted = list(counts) if ns_ids is None else list(dict.fromkeys(ns_ids))
        cache = self.cache
        with cache.lock:
            stale = [n for n in wanted if cache.held.get(n) != counts.get(n, 0)]
        if stale:
            rows = yield Statement(
                f"SELECT item_id, ns_id, embedding FROM {VECTORS} WHERE ns_id = ANY(%s) "
                # another part of the database may index with another model: only vectors of this size
                "AND octet_length(embedding) = %s",
                [stale, cache.plan.dims * 4],
            )
            with cache.lock:
                cache.matrix.drop(stale)
                if rows:
                    cache.matrix.add(id_column(rows, 0), id_column(rows, 1), float_rows(rows, 2))
                cache.held.update({n: counts.get(n, 0) for n in stale})
        self.fresh.update({n: counts.get(n, 0) for n in wanted})
        with cache.lock:
            return cache.matrix.search(query, k, ns_ids=ns_ids, item_ids=item_ids)

    def _items(self, query: Vector, k: int, item_ids: list[int]) -> Program[Hits]:
        """A few given items (a keyword hit's similarity): scored in the matrix where their namespace was
        found fresh in this transaction, the others from their rows (loading no namespace)."""
        cache = self.cache
        hits: Hits = []
        with cache.lock:
            fresh = [n for n, count in self.fresh.items() if cache.held.get(n) == count]
            if fresh:
                hits = cache.matrix.search(query, len(item_ids), ns_ids=fresh, item_ids=item_ids)
        found = {i for i, _ in hits}
        others = [i for i in dict.fromkeys(item_ids) if i not in found]
        if others:
            rows = yield Statement(
                f"SELECT item_id, embedding FROM {VECTORS} WHERE item_id = ANY(%s) AND octet_length(embedding) = %s",
                [others, cache.plan.dims * 4],
            )
            return with_rows(hits, rows, query, k, cache.plan.distance)
        return hits[:k]

    def finishing(self, changes: list[VecChanged]) -> Program[None]:
        """Last in a write's transaction: the counts of the held namespaces it changed, and whether it
        moved each (it holds their row locks now, so no one else moves them before its commit)."""
        cache = self.cache
        with cache.lock:
            removed = [i for change in changes for i in change.removed]
            touched = {n for change in changes for _, n, _ in change.added}
            touched |= set(cache.matrix.namespaces_of(removed).values())
            touched &= set(cache.held)
        if not touched:
            self._moved = {}
            return
        rows = yield Statement(
            f"SELECT ns_id, changes, xact = pg_current_xact_id() FROM {STORE_VECTOR_CHANGES_TABLE} "
            "WHERE ns_id = ANY(%s)",
            [sorted(touched)],
        )
        moved = {int(r[0]): (int(r[1]), bool(r[2])) for r in rows}
        self._moved = {n: moved.get(n, (0, False)) for n in touched}

    def committed(self, changes: list[VecChanged]) -> None:
        """After the commit: the write's vectors into the namespaces whose count it alone moved since the
        matrix read them; the others dropped (a namespace not checked before the commit is not taken)."""
        cache = self.cache
        moved = self._moved or {}
        with cache.lock:
            kept: set[int] = set()
            for ns_id, (count, mine) in moved.items():
                before = count - 1 if mine else count
                if cache.held.get(ns_id) == before:
                    cache.held[ns_id] = count
                    kept.add(ns_id)
                elif ns_id in cache.held:
                    del cache.held[ns_id]
                    cache.matrix.drop([ns_id])
            for change in changes:
                # only in the namespaces taken: another may have been read since, with this write in it
                of = cache.matrix.namespaces_of(change.removed)
                cache.matrix.remove([i for i, n in of.items() if n in kept])
                added = [a for a in change.added if a[1] in kept]
                if added:
                    cache.matrix.add(
                        np.array([a[0] for a in added], dtype=np.int64),
                        np.array([a[1] for a in added], dtype=np.int64),
                        np.vstack([a[2] for a in added]).astype(np.float32),
                    )


def _counts(ns_ids: Iterable[int] | None) -> Program[dict[int, int]]:
    """The change counts of these namespaces (None: of every namespace that ever had a vector)."""
    table = STORE_VECTOR_CHANGES_TABLE
    if ns_ids is None:
        rows = yield Statement(f"SELECT ns_id, changes FROM {table}")
    else:
        rows = yield Statement(f"SELECT ns_id, changes FROM {table} WHERE ns_id = ANY(%s)", [list(ns_ids)])
    return {int(r[0]): int(r[1]) for r in rows}
