"""Where the memory client's thread leases on a store are held (:class:`remem._lease.LeaseTarget`).

remem's stores know their own (:attr:`RememStoreBase.lease_target`), and so does a store that wraps one
(:class:`LeaseTargeted`: the server's tenant view holds its leases where the shared store does, so writers in
every worker take turns). LangGraph's SQLite and PostgreSQL stores are mapped by their class to the database
of the connection they were given; any other store (``InMemoryStore``, a third party's) keeps its threads'
leases in this process. Likewise for the fencing of a write (:class:`Fenced`) and the read sessions
of a flow (:class:`SharesReads`): a store that has them, or wraps one that does, says so by its methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from langgraph.store.base import Op, Result

from remem._lease_target import LeaseTarget, is_loaded_instance
from remem.store._base import Fence, RememStoreBase
from remem.store._reads import Reads

__all__ = [
    "Fenced",
    "LeaseTargeted",
    "SharesReads",
    "afenced_batch",
    "fenced_batch",
    "reading",
    "store_lease_target",
]


@runtime_checkable
class LeaseTargeted(Protocol):
    """A store that says where its threads' leases are held."""

    @property
    def lease_target(self) -> LeaseTarget: ...


@runtime_checkable
class Fenced(Protocol):
    """A store whose batch can check a thread lease's fencing token in the transaction that commits it
    (:meth:`RememStoreBase.fenced_batch`): remem's stores and the server's tenant view of one. On any
    other store the memory client can only verify its lease before each write."""

    def fenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]: ...

    async def afenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]: ...


@runtime_checkable
class SharesReads(Protocol):
    """A store whose batches of reads can share one read transaction (:meth:`RememStoreBase.reading`):
    remem's stores and the server's tenant view of one; ``shares_reads``: whether they do (PostgreSQL)."""

    @property
    def shares_reads(self) -> bool: ...

    def reading(self) -> contextlib.AbstractContextManager[Reads]: ...


_STOCK = (
    ("langgraph.store.sqlite", "SqliteStore"),
    ("langgraph.store.sqlite.aio", "AsyncSqliteStore"),
    ("langgraph.store.postgres", "PostgresStore"),
    ("langgraph.store.postgres.aio", "AsyncPostgresStore"),
)
_STOCK_AIOSQLITE = (("langgraph.store.sqlite.aio", "AsyncSqliteStore"),)


def store_lease_target(store: Any) -> LeaseTarget:
    """The lease target of ``store``."""
    if isinstance(store, RememStoreBase | LeaseTargeted):
        return store.lease_target
    if is_loaded_instance(store, _STOCK) and not is_loaded_instance(store, _STOCK_AIOSQLITE):
        return LeaseTarget.of_connection(store.conn)
    return LeaseTarget.in_process(store)


def fenced_batch(store: Any, ops: Iterable[Op], fence: Fence) -> list[Result]:
    """``store.batch(ops)``, with ``fence`` checked in its transaction where the store can
    (:class:`Fenced`); any other store runs the batch alone."""
    if isinstance(store, Fenced):
        return store.fenced_batch(ops, fence)
    results: list[Result] = store.batch(ops)
    return results


async def afenced_batch(store: Any, ops: Iterable[Op], fence: Fence) -> list[Result]:
    """Async version of :func:`fenced_batch`."""
    if isinstance(store, Fenced):
        return await store.afenced_batch(ops, fence)
    results: list[Result] = await store.abatch(ops)
    return results


def reading(store: Any) -> contextlib.AbstractContextManager[Reads]:
    """``store``'s read session where its reads share a transaction (:class:`SharesReads`); on any
    other store, each batch goes to its ``batch`` alone."""
    if isinstance(store, SharesReads) and store.shares_reads:
        return store.reading()
    return contextlib.nullcontext(store.batch)
