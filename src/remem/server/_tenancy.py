"""Tenants at the storage layer: a store and thread ids that a tenant's requests cannot step out of.

Every request of a tenant's key runs on :class:`TenantStore`, a LangGraph ``BaseStore`` over the shared
store that puts every namespace under the tenant's slot of :mod:`remem.layout`
(``("tenants", T, *namespace)``, built by :func:`remem.layout.namespace`) and takes it off again in what it
returns. The memory client, the SDK's store endpoints and the MCP tools all run on it, so none of their
reads, lists, counts, searches or deletes can reach another tenant's rows: B's ``("threads", "t1")`` is a
different namespace from A's, and not finding it answers 404 exactly as a thread that never existed.

Checkpoints (LangGraph's savers key threads by a plain ``thread_id``) get the same slot in the id:
:func:`checkpoint_thread` is ``tenants:T:<thread id>``; :func:`tenant_thread` reads it back and refuses an
id of another tenant. The usage ledger's rows of a tenant carry those ids (:class:`TenantMeter`).

Without keys (a server on loopback used by one developer) the tenant is None and nothing is rewritten:
the server reads the database as the library does.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from remem import layout
from remem._lease_target import LeaseTarget
from remem.errors import ConfigError
from remem.store import ScoredItem
from remem.store._base import Fence
from remem.store._reads import Reads
from remem.store._targets import Fenced, SharesReads, reading, store_lease_target
from remem.usage import Meter, UsageEvent

__all__ = [
    "TenantMeter",
    "TenantStore",
    "check_tenant",
    "checkpoint_thread",
    "scoped_store",
    "tenant_thread",
]

_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_tenant(tenant: str) -> str:
    """A tenant name: 1-64 letters, digits, ``-`` or ``_`` (it is a namespace label and part of ids)."""
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise ConfigError(
            f"tenant {tenant!r} cannot be used: give 1-64 letters, digits, '-' or '_' (e.g. 'acme')"
        )
    layout.namespace(tenant=tenant)  # the layout's own rule too
    return tenant


def checkpoint_thread(thread_id: str, tenant: str | None) -> str:
    """The checkpointer's (and usage ledger's) thread id of a tenant's ``thread_id``
    (:func:`remem.layout.tenant_id`, the rule the erasure of a tenant's data uses too)."""
    return layout.tenant_id(thread_id, tenant=tenant)


def tenant_thread(stored_id: str, tenant: str | None) -> str | None:
    """The tenant's own id of a checkpointer thread id, or None when it is not this tenant's."""
    return layout.id_of_tenant(stored_id, tenant=tenant)


class TenantStore(BaseStore):
    """``inner`` seen by one tenant: every namespace under ``("tenants", tenant)``.

    The thread leases of the memory client are held where ``inner``'s are (:attr:`lease_target`), so
    writers in every worker take turns; two tenants' threads of the same id share a lease, which costs
    a wait at most, never a read.
    """

    def __init__(self, inner: BaseStore, tenant: str) -> None:
        self.inner = inner
        self.tenant = check_tenant(tenant)
        self.root: tuple[str, ...] = layout.namespace(tenant=tenant)
        self.index_config = getattr(inner, "index_config", None)
        self.supports_ttl = inner.supports_ttl
        self.supports_keyword_only = bool(getattr(inner, "supports_keyword_only", False))
        self.ttl_config = inner.ttl_config
        conn = getattr(inner, "conn", None)
        if conn is not None:
            self.conn = conn

    @property
    def lease_target(self) -> LeaseTarget:
        return store_lease_target(self.inner)

    def __repr__(self) -> str:
        return f"TenantStore({type(self.inner).__name__}, tenant={self.tenant!r})"

    def _in(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        return (*self.root, *namespace)

    def _out(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(namespace[len(self.root) :])

    def _op(self, op: Op) -> Op:
        if isinstance(op, GetOp | PutOp):
            return op._replace(namespace=self._in(op.namespace))
        if isinstance(op, SearchOp):
            return op._replace(namespace_prefix=self._in(op.namespace_prefix))
        if isinstance(op, ListNamespacesOp):
            conditions = list(op.match_conditions or ())
            prefixed = [
                MatchCondition("prefix", self._in(tuple(c.path))) if c.match_type == "prefix" else c
                for c in conditions
            ]
            if not any(c.match_type == "prefix" for c in conditions):
                prefixed.insert(0, MatchCondition("prefix", self.root))
            depth = None if op.max_depth is None else op.max_depth + len(self.root)
            return op._replace(match_conditions=tuple(prefixed), max_depth=depth)
        raise ConfigError(f"unknown store operation {type(op).__name__}")  # pragma: no cover

    def _item(self, item: Item | None) -> Item | None:
        if item is None:
            return None
        namespace = self._out(item.namespace)
        kind = type(item)
        # built directly: copy.copy's generic protocol costs more than the rest of the call
        if isinstance(item, ScoredItem) and kind is ScoredItem:
            return ScoredItem(
                namespace,
                item.key,
                item.value,
                item.created_at,
                item.updated_at,
                score=item.score,
                mode=item.mode,
                scores=item.scores,
            )
        if isinstance(item, SearchItem) and kind is SearchItem:
            return SearchItem(
                namespace, item.key, item.value, item.created_at, item.updated_at, score=item.score
            )
        if kind is Item:
            return Item(
                value=item.value,
                key=item.key,
                namespace=namespace,
                created_at=item.created_at,
                updated_at=item.updated_at,
            )
        own = copy.copy(item)  # an inner store's own kind of item
        own.namespace = namespace
        return own

    def _result(self, op: Op, result: Result) -> Result:
        found: Any = result
        if isinstance(op, GetOp):
            return self._item(found)
        if isinstance(op, SearchOp):
            return [item for item in (self._item(hit) for hit in found) if item is not None]
        if isinstance(op, ListNamespacesOp):
            return [self._out(tuple(ns)) for ns in found]
        return result

    def _scoped(self, run: Callable[[list[Op]], list[Result]], ops: Iterable[Op]) -> list[Result]:
        given = list(ops)
        results = run([self._op(op) for op in given])
        return [self._result(op, r) for op, r in zip(given, results, strict=True)]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._scoped(self.inner.batch, ops)

    @property
    def shares_reads(self) -> bool:
        return isinstance(self.inner, SharesReads) and self.inner.shares_reads

    @contextlib.contextmanager
    def reading(self) -> Iterator[Reads]:
        """``inner``'s read session (:func:`remem.store._targets.reading`), seen by the tenant."""
        with reading(self.inner) as reads:
            yield lambda ops: self._scoped(reads, ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        given = list(ops)
        results = await self.inner.abatch([self._op(op) for op in given])
        return [self._result(op, r) for op, r in zip(given, results, strict=True)]

    def fenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]:
        """:meth:`RememStoreBase.fenced_batch` on ``inner`` (a plain batch where ``inner`` has none)."""
        inner = self.inner
        if isinstance(inner, Fenced):
            return self._scoped(lambda mine: inner.fenced_batch(mine, fence), ops)
        return self._scoped(inner.batch, ops)

    async def afenced_batch(self, ops: Iterable[Op], fence: Fence) -> list[Result]:
        """Async version of :meth:`fenced_batch`."""
        given = list(ops)
        mine = [self._op(op) for op in given]
        inner = self.inner
        if isinstance(inner, Fenced):
            results = await inner.afenced_batch(mine, fence)
        else:
            results = await inner.abatch(mine)
        return [self._result(op, r) for op, r in zip(given, results, strict=True)]


def scoped_store(store: BaseStore, tenant: str | None) -> BaseStore:
    """``store`` as ``tenant`` sees it (itself when there is no tenant)."""
    return store if tenant is None else TenantStore(store, tenant)


class TenantMeter(Meter):
    """A meter whose rows name a tenant's threads and users by their tenant-qualified ids."""

    def __init__(self, meter: Meter, tenant: str) -> None:
        super().__init__(meter.ledger, meter.prices, count=meter.count)
        self.tenant = tenant

    def event(self, kind: Any, model: str, **fields: Any) -> UsageEvent:
        for name in ("thread_id", "user_id"):
            if isinstance(fields.get(name), str):
                fields[name] = checkpoint_thread(fields[name], self.tenant)
        return super().event(kind, model, **fields)
