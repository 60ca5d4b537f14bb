"""An in-process matrix of every stored vector, searched exactly with NumPy (recall 1.0 by construction).

On this machine NumPy brute force over 10k x 384 took 0.13 ms against 3.2 ms for sqlite-vec's vec0, and the
stdlib sqlite3 cannot load extensions at all, so the SQLite store keeps its vectors as float32 blobs and
searches this cache. Rows are appended in place; removed rows are masked and compacted when they pile up.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt


class VectorMatrix:
    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._vecs = np.zeros((1024, dims), dtype=np.float32)
        self._items = np.zeros(1024, dtype=np.int64)
        self._ns = np.zeros(1024, dtype=np.int64)
        self._alive = np.zeros(1024, dtype=bool)
        self._n = 0
        self._rows: dict[int, list[int]] = {}
        self._dead = 0

    def __len__(self) -> int:
        return self._n - self._dead

    def _grow(self, need: int) -> None:
        cap = len(self._items)
        if need <= cap:
            return
        new = max(need, cap * 2)
        self._vecs = np.resize(self._vecs, (new, self.dims))
        for name in ("_items", "_ns", "_alive"):
            old = getattr(self, name)
            grown = np.zeros(new, dtype=old.dtype)
            grown[: self._n] = old[: self._n]
            setattr(self, name, grown)

    def add(
        self, item_ids: npt.NDArray[np.int64], ns_ids: npt.NDArray[np.int64], vecs: npt.NDArray[np.float32]
    ) -> None:
        count = len(item_ids)
        if not count:
            return
        self._grow(self._n + count)
        start, end = self._n, self._n + count
        self._vecs[start:end] = vecs
        self._items[start:end] = item_ids
        self._ns[start:end] = ns_ids
        self._alive[start:end] = True
        for offset, item_id in enumerate(item_ids.tolist()):
            self._rows.setdefault(item_id, []).append(start + offset)
        self._n = end

    def remove(self, item_ids: Iterable[int]) -> None:
        for item_id in item_ids:
            for row in self._rows.pop(item_id, ()):
                self._alive[row] = False
                self._dead += 1
        if self._dead > 4096 and self._dead * 2 > self._n:
            self._compact()

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: self._n])
        items, ns, vecs = self._items[keep].copy(), self._ns[keep].copy(), self._vecs[keep].copy()
        self.__init__(self.dims)  # type: ignore[misc]
        self.add(items, ns, vecs)

    def search(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        *,
        ns_ids: Iterable[int] | None = None,
        item_ids: Iterable[int] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best (item id, cosine) pairs, an item scored by its best vector."""
        n = self._n
        if not n or k <= 0:
            return []
        scores = self._vecs[:n] @ query.astype(np.float32)
        mask = self._alive[:n].copy()
        if ns_ids is not None:
            mask &= np.isin(self._ns[:n], np.fromiter(ns_ids, dtype=np.int64))
        if item_ids is not None:
            mask &= np.isin(self._items[:n], np.fromiter(item_ids, dtype=np.int64))
        scores = np.where(mask, scores, -np.inf)
        valid = int(mask.sum())
        want = min(valid, k * 4)
        while True:
            if want <= 0:
                return []
            top = np.argpartition(-scores, want - 1)[:want] if want < n else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            best: dict[int, float] = {}
            for row in top.tolist():
                if scores[row] == -np.inf:
                    break
                best.setdefault(int(self._items[row]), float(scores[row]))
            if len(best) >= k or want >= valid:
                return list(best.items())[:k]
            want = min(valid, want * 4)
