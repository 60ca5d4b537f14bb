"""What a store program is and how it runs: a generator of SQL statements over a small executor.

A program (``Program[T]``) yields :class:`Sql` statements, is sent each one's rows back, and returns a T;
it never touches a connection. What is not SQL stays out of the yield channel: vectors are embedded before
the transaction opens (:attr:`Tx.ready`), vector search is a call on :attr:`Tx.vectors` (itself a program,
so that the async driver runs it too), and what to do after the commit (TTL refreshes, changes to an
in-process vector cache) is collected on the :class:`Tx`. :func:`drive` and :func:`adrive` run a program
inside a transaction that their caller opened (as the checkpoint package's savers do with its ``Op``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")

Rows = list[tuple[Any, ...]]
Fetch = Literal["all", "none", "count", "many"]
Vector = npt.NDArray[np.float32]
Hits = list[tuple[int, float]]
"""(item id, score) pairs, best first."""


@dataclass(frozen=True, slots=True)
class Sql:
    """One statement with ``?`` placeholders already in the dialect's spelling. ``fetch``: ``"all"`` sends
    its rows back, ``"count"`` one row holding its row count, ``"none"`` and ``"many"`` (``params`` is a
    list of parameter rows, run with executemany) no rows."""

    sql: str
    params: Sequence[Any] = ()
    fetch: Fetch = "all"


def many(sql: str, rows: Sequence[Sequence[Any]]) -> Sql:
    """``sql`` run once per parameter row."""
    return Sql(sql, rows, "many")


Program = Generator[Sql, Rows, T]
Execute = Callable[[Sql], Rows]
AExecute = Callable[[Sql], Awaitable[Rows]]


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


def drive(program: Program[T], first_sql: Sql, execute: Execute) -> T:
    """Run ``program``, whose first statement ``first_sql`` the caller took (a program that needs no
    statement opens no transaction), to its result."""
    request = first_sql
    while True:
        rows = execute(request)
        try:
            request = program.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


async def adrive(program: Program[T], first_sql: Sql, execute: AExecute) -> T:
    """Async version of :func:`drive`."""
    request = first_sql
    while True:
        rows = await execute(request)
        try:
            request = program.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


def run(program: Program[T], execute: Execute) -> T:
    """Run ``program`` to its result with ``execute`` (in a transaction the caller holds open)."""
    try:
        request = next(program)
    except StopIteration as done:
        result: T = done.value
        return result
    return drive(program, request, execute)


async def arun(program: Program[T], execute: AExecute) -> T:
    """Async version of :func:`run`."""
    try:
        request = next(program)
    except StopIteration as done:
        result: T = done.value
        return result
    return await adrive(program, request, execute)
