"""What a store program has besides its statements: a program (``Program[T]``, of :mod:`remem._statements`)
yields statements, is sent each one's rows back, and returns a T; it never touches a connection. What is not
SQL stays out of the yield channel: vectors are embedded before the transaction opens (:attr:`Tx.ready`),
vector search is a call on :attr:`Tx.vectors` (itself a program, so that the async driver runs it too), and
what to do after the commit (TTL refreshes, changes to an in-process vector cache) is collected on the
:class:`Tx`. The store's drivers (``RememStoreBase._run``, ``remem.store._async.AsyncStore._arun``) run programs with
:mod:`remem._statements`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from remem._statements import AExecute, Execute, Program, Rows, Statement, many

__all__ = [
    "AExecute",
    "Execute",
    "Hits",
    "NoVectors",
    "Program",
    "Rows",
    "Statement",
    "Tx",
    "VecChanged",
    "Vector",
    "VectorSearch",
    "many",
]

Vector = npt.NDArray[np.float32]
Hits = list[tuple[int, float]]
"""(item id, score) pairs, best first."""


class VectorSearch(Protocol):
    """Exact or approximate nearest neighbours, the one effect of a search that is not plain SQL."""

    def search(
        self, query: Vector, k: int, ns_ids: list[int] | None, item_ids: list[int] | None
    ) -> Program[Hits]:
        """The ``k`` best items (among ``ns_ids`` / ``item_ids``; None: any), an item scored by its best vector."""
        ...


@dataclass(frozen=True, slots=True)
class VecChanged:
    """Vectors a write replaced: those of ``removed`` items went, ``added`` (item, namespace, vector) came."""

    removed: list[int]
    added: list[tuple[int, int, Vector]]


@dataclass
class Tx:
    """One run of a program: its inputs that are not SQL and what it leaves to do after the commit."""

    vectors: VectorSearch
    ready: Mapping[bytes, Vector] = field(default_factory=dict)
    """Vectors embedded before the transaction, by text hash."""
    touched: list[int] = field(default_factory=list)
    """Items read with ``refresh_ttl`` whose expiry to push back, after the read in a write transaction of
    its own (so that a read never upgrades itself to a writer, which cannot wait)."""
    changes: list[VecChanged] = field(default_factory=list)
    unembedded: dict[bytes, str] = field(default_factory=dict)
    """Texts the program needed and nobody embedded ahead (another writer changed an item between the
    look-up and the write). A program that adds one stops before it writes anything; the driver embeds
    them outside the transaction and runs the program again."""

    def vector(self, text_hash: bytes, text: str) -> Vector | None:
        """The vector embedded ahead for ``text``; None (and ``text`` noted in :attr:`unembedded`) if none."""
        vec = self.ready.get(text_hash)
        if vec is None:
            self.unembedded[text_hash] = text
        return vec


class NoVectors:
    """The vector search of a store without an index (programs never call it there)."""

    def search(
        self, query: Vector, k: int, ns_ids: list[int] | None, item_ids: list[int] | None
    ) -> Program[Hits]:
        return []
        yield  # a generator that asks for nothing
