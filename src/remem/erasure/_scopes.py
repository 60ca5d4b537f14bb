"""What an erasure scope covers in the store, and the store-only erasure :func:`forget`.

The store deletes what it is told (:meth:`~remem.store.RememStoreBase.delete_items`: prefixes, keys, value
matches); this module says what a user's, a thread's or a namespace's data is, in remem's layout
(:mod:`remem.layout`):

- a **user** U: ``("users", U, ...)``, the items under ``("threads",)``, the extraction state and the
  threads' listings whose ``user_id`` is U, and every thread held by U alone, whole (a thread in which only
  U is named as an item's ``user_id``; one shared with another user keeps the other's items);
- a **thread** T: ``("threads", T, ...)``, its extraction state and listing, and the memories extracted
  from it (items under ``("users",)`` whose ``thread_id`` is T);
- a **namespace**: everything under it, and the listings of the threads whose metadata it holds.

With a ``tenant`` each of these is the same rule in the tenant's slot (``("tenants", T, ...)``, built by
:mod:`remem.layout`'s ``tenant=``): a tenant's scope reaches nothing of another tenant's, nor of the
untenanted data.

The memory client's thread records (``("threads", T, "meta")`` naming U) are read here too, through the
store's public search: they tell an erasure whose checkpoints go (:func:`threads_of_user`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from remem.errors import RememUsageError
from remem.layout import (
    THREAD_META_KEY,
    check_label,
    extraction_root,
    extraction_state,
    thread_id_of,
    thread_listing,
    thread_listings_root,
    thread_meta,
    thread_root,
    threads_root,
    user_root,
    users_root,
)
from remem.layout import namespace as namespace_in
from remem.store import DeleteReport, RememStoreBase, Statements, check_delete

__all__ = [
    "ForgetReport",
    "StoreScope",
    "aforget",
    "delete_scope",
    "forget",
    "store_scope",
    "threads_of_user",
]

Namespace = tuple[str, ...]
_PAGE = 1000


@dataclass
class ForgetReport:
    """What an erasure removed from the store. ``scopes`` says what was asked; counts are rows deleted."""

    scopes: list[str]
    items: int = 0
    vectors: int = 0
    keyword_rows: int = 0
    namespaces: int = 0
    queued: int = 0
    compacted: bool = False
    item_keys: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("scopes", ", ".join(self.scopes)),
            ("items", str(self.items)),
            ("vectors", str(self.vectors)),
            ("keyword index rows", str(self.keyword_rows)),
            ("namespaces", str(self.namespaces)),
            ("queued extraction work", str(self.queued)),
            ("storage compacted", "yes" if self.compacted else "no"),
        ]

    @classmethod
    def of(cls, deleted: DeleteReport, scopes: list[str], tenant: str | None = None) -> ForgetReport:
        """The report of a store delete: its counts, and how many items were queued extraction work."""
        root = extraction_root(tenant=tenant)
        return cls(
            scopes=scopes,
            items=deleted.items,
            vectors=deleted.vectors,
            keyword_rows=deleted.keyword_rows,
            namespaces=deleted.namespaces,
            queued=sum(1 for ns, _ in deleted.item_keys if ns[: len(root)] == root),
            compacted=deleted.compacted,
            item_keys=list(deleted.item_keys),
        )


@dataclass(frozen=True)
class StoreScope:
    """One scope as the store's delete takes it; ``user_id``: whose whole threads go too; ``tenant``: whose
    slot the prefixes are in."""

    prefixes: list[Namespace]
    matching: list[tuple[Namespace, dict[str, str]]]
    label: str
    user_id: str | None = None
    tenant: str | None = None


def store_scope(
    user_id: str | None = None,
    thread_id: str | None = None,
    namespace: Sequence[str] | str | None = None,
    *,
    tenant: str | None = None,
) -> StoreScope:
    """The prefixes and value matches of exactly one scope (in ``tenant``'s slot when given), checked as
    the store checks them."""
    given = [x for x in (user_id, thread_id, namespace) if x is not None]
    if len(given) != 1:
        raise RememUsageError("forget needs exactly one of user_id=, thread_id= or namespace=")
    t = tenant
    of = "" if tenant is None else f" of tenant {tenant}"
    if user_id is not None:
        check_label(user_id, "user_id")
        scope = StoreScope(
            [user_root(user_id, tenant=t)],
            [
                (threads_root(tenant=t), {"user_id": user_id}),
                (extraction_root(tenant=t), {"user_id": user_id}),
                (thread_listings_root(tenant=t), {"user_id": user_id}),
            ],
            f"user {user_id}{of}",
            user_id,
            t,
        )
    elif thread_id is not None:
        check_label(thread_id, "thread_id")
        scope = StoreScope(
            [
                thread_root(thread_id, tenant=t),
                extraction_state(thread_id, tenant=t),
                thread_listing(thread_id, tenant=t),
            ],
            [(users_root(tenant=t), {"thread_id": thread_id})],
            f"thread {thread_id}{of}",
            tenant=t,
        )
    else:
        ns = tuple(namespace.split(".")) if isinstance(namespace, str) else tuple(namespace or ())
        listings = _listings_of(ns, t)
        scope = StoreScope(
            [namespace_in(*ns, tenant=t), *listings], [], "namespace " + ".".join(ns) + of, tenant=t
        )
    check_delete(scope.prefixes, (), scope.matching)
    return scope


def _listings_of(ns: Namespace, tenant: str | None) -> list[Namespace]:
    """The thread listings a namespace's erasure takes with it: those of the threads whose metadata it
    holds (a listing is a copy of that metadata); ``ns`` and the listings in ``tenant``'s slot."""
    if threads_root()[: len(ns)] == ns:  # the threads' root or above it: every thread
        return [thread_listings_root(tenant=tenant)]
    thread = thread_id_of(ns)
    if thread is not None and thread_meta(thread)[: len(ns)] == ns:
        return [thread_listing(thread, tenant=tenant)]
    return []


# ---------------------------------------------------------------- reads: the user's threads


def _pages(store: RememStoreBase, prefix: Namespace, filter: Mapping[str, Any] | None) -> Iterator[Any]:
    offset = 0
    while True:
        page = store.search(
            prefix, filter=dict(filter) if filter else None, limit=_PAGE, offset=offset, refresh_ttl=False
        )
        yield from page
        if len(page) < _PAGE:
            return
        offset += _PAGE


async def _apages(
    store: RememStoreBase, prefix: Namespace, filter: Mapping[str, Any] | None
) -> AsyncIterator[Any]:
    offset = 0
    while True:
        page = await store.asearch(
            prefix, filter=dict(filter) if filter else None, limit=_PAGE, offset=offset, refresh_ttl=False
        )
        for item in page:
            yield item
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _named(items: Sequence[Any], tenant: str | None) -> dict[Namespace, None]:
    """The threads (``("threads", T)``, in ``tenant``'s slot) holding these items."""
    root = threads_root(tenant=tenant)
    return {tuple(i.namespace[: len(root) + 1]): None for i in items if len(i.namespace) > len(root)}


def _alone(user_id: str, items: Sequence[Any]) -> bool:
    """Whether every item of a thread that names a user names ``user_id``."""
    return {i.value.get("user_id") for i in items} - {None} == {user_id}


def _meta_threads(items: Sequence[Any], tenant: str | None) -> list[str]:
    found = set()
    for item in items:
        thread = thread_id_of(tuple(item.namespace), tenant=tenant)
        if (
            thread is not None
            and tuple(item.namespace) == thread_meta(thread, tenant=tenant)
            and item.key == THREAD_META_KEY
        ):
            found.add(thread)
    return sorted(found)


def threads_of_user(store: RememStoreBase, user_id: str, *, tenant: str | None = None) -> list[str]:
    """Threads whose memory-client record (``("threads", T, "meta")``, in ``tenant``'s slot) names
    ``user_id`` as their user."""
    return _meta_threads(list(_pages(store, threads_root(tenant=tenant), {"user_id": user_id})), tenant)


def _with_listings(threads: list[Namespace], tenant: str | None) -> list[Namespace]:
    """The prefixes of threads taken whole, and of their listings (which may name no user)."""
    ids = (thread_id_of(t, tenant=tenant) for t in threads)
    return [*threads, *(thread_listing(t, tenant=tenant) for t in ids if t is not None)]


def _whole_threads(store: RememStoreBase, scope: StoreScope) -> list[Namespace]:
    if scope.user_id is None:
        return []
    root = threads_root(tenant=scope.tenant)
    named = _named(list(_pages(store, root, {"user_id": scope.user_id})), scope.tenant)
    alone = [t for t in named if _alone(scope.user_id, list(_pages(store, t, None)))]
    return _with_listings(alone, scope.tenant)


async def _awhole_threads(store: RememStoreBase, scope: StoreScope) -> list[Namespace]:
    if scope.user_id is None:
        return []
    root = threads_root(tenant=scope.tenant)
    named = _named([i async for i in _apages(store, root, {"user_id": scope.user_id})], scope.tenant)
    alone = [t for t in named if _alone(scope.user_id, [i async for i in _apages(store, t, None)])]
    return _with_listings(alone, scope.tenant)


# ---------------------------------------------------------------- deleting a scope


def delete_scope(
    store: RememStoreBase,
    scope: StoreScope,
    *,
    compact: bool = False,
    then: Callable[[ForgetReport], Statements[Any]] | None = None,
) -> ForgetReport:
    """Delete ``scope`` from ``store`` in one transaction; ``then(report)``: statements committed with it."""
    whole = _whole_threads(store, scope)
    deleted = store.delete_items(
        [*scope.prefixes, *whole],
        matching=scope.matching,
        compact=compact,
        then=None if then is None else (lambda d: then(ForgetReport.of(d, [scope.label], scope.tenant))),
    )
    return ForgetReport.of(deleted, [scope.label], scope.tenant)


def forget(
    store: RememStoreBase,
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    namespace: tuple[str, ...] | str | None = None,
) -> ForgetReport:
    """Erase a user's, a thread's or a namespace's items from ``store`` (vectors, keyword rows, queued
    extraction work, cached embeddings included), then compact storage; what was deleted.

    The store's part only: :func:`remem.erasure.erase` also takes the checkpoints and the usage ledger's
    rows, journaled so that it always finishes.
    """
    return delete_scope(store, store_scope(user_id, thread_id, namespace), compact=True)


async def aforget(
    store: RememStoreBase,
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    namespace: tuple[str, ...] | str | None = None,
) -> ForgetReport:
    """Async version of :func:`forget`."""
    scope = store_scope(user_id, thread_id, namespace)
    whole = await _awhole_threads(store, scope)
    deleted = await store.adelete_items([*scope.prefixes, *whole], matching=scope.matching, compact=True)
    return ForgetReport.of(deleted, [scope.label])
