"""Forget through the server: :func:`remem.erasure.erase` on the scopes a tenant owns.

Without a tenant this is ``erase(url, user_id=...)`` or ``erase(url, thread_id=...)`` as the CLI runs it.
A tenant's data lives under its slot (``("tenants", T, ...)`` in the store, ``tenants:T:<id>`` in the
checkpointer and the ledger), which the library's user and thread scopes do not name; so a tenant's thread
is erased as its store namespaces (:func:`remem.layout.thread_root` and its listing, in the tenant's slot) and its
checkpoint thread (checkpoints and usage rows); a tenant's user as the user's namespace and each of the
user's threads. Each erasure is journaled and resumable: sending the same request again finishes one
that stopped part way. The tenant's ingestion journal (in its slot too) then loses the erased user's and
threads' ids (:func:`remem.ingestion.forget_in_journal`, as the library's erasure does for its own).
"""

from __future__ import annotations

from remem import layout
from remem._lease import DEFAULT_LEASE_TIMEOUT
from remem.erasure import ErasureReport, erase
from remem.ingestion import forget_in_journal
from remem.server._services import Services
from remem.server._tenancy import checkpoint_thread

__all__ = ["forget_scope"]


def _thread(services: Services, tenant: str, thread_id: str) -> list[ErasureReport]:
    return [
        erase(services.url, namespace=list(layout.thread_root(thread_id, tenant=tenant))),
        erase(services.url, namespace=list(layout.thread_listing(thread_id, tenant=tenant))),
        erase(services.url, thread_id=checkpoint_thread(thread_id, tenant)),
    ]


def forget_scope(
    services: Services, tenant: str | None, *, user_id: str | None = None, thread_id: str | None = None
) -> list[ErasureReport]:
    """Erase ``user_id``'s or ``thread_id``'s data as ``tenant`` owns it; a thread not found is a 404."""
    from remem.server._v1 import thread_infos

    if tenant is None:
        return [erase(services.url, user_id=user_id, thread_id=thread_id)]
    memory = services.memory_for(tenant)
    if thread_id is not None:
        memory.get_thread(thread_id)  # NotFoundError (404) when it is not this tenant's
        reports = _thread(services, tenant, thread_id)
        _forget_in_journal(services, tenant, None, [thread_id])
        return reports
    assert user_id is not None
    owned: list[str] = []
    offset = 0
    while True:  # every thread first: erasing while paging would shift the pages
        page = thread_infos(memory, 1000, offset)
        owned.extend(info.thread_id for info in page if info.user_id == user_id)
        if len(page) < 1000:
            break
        offset += 1000
    reports = [erase(services.url, namespace=list(layout.user_root(user_id, tenant=tenant)))]
    for owned_thread in owned:
        reports.extend(_thread(services, tenant, owned_thread))
    _forget_in_journal(services, tenant, user_id, owned)
    return reports


def _forget_in_journal(services: Services, tenant: str, user_id: str | None, threads: list[str]) -> None:
    store = services.store_for(tenant)
    forget_in_journal(store, user_id=user_id, thread_ids=threads, timeout=DEFAULT_LEASE_TIMEOUT)
