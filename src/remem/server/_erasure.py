"""Forget through the server: :func:`remem.erasure.erase` of the scope as the request's tenant owns it.

Without a tenant this is ``erase(url, user_id=...)`` or ``erase(url, thread_id=...)`` as the CLI runs it.
With one it is ``erase(url, ..., tenant=T)``: the library's user or thread scope in the tenant's slot
(its thread, extraction state and listing, the memories extracted from it; a user's namespace and the
items naming the user), the tenant's checkpoint threads and ledger rows, and the tenant's ingestion
journal. One journaled erasure, resumable like every other: sending the same request again finishes one
that stopped part way.
"""

from __future__ import annotations

from remem.erasure import ErasureReport, erase
from remem.server._services import Services

__all__ = ["forget_scope"]


def forget_scope(
    services: Services, tenant: str | None, *, user_id: str | None = None, thread_id: str | None = None
) -> list[ErasureReport]:
    """Erase ``user_id``'s or ``thread_id``'s data as ``tenant`` owns it; a thread not found is a 404."""
    if tenant is not None and thread_id is not None:
        services.memory_for(tenant).get_thread(thread_id)  # NotFoundError (404) when it is not this tenant's
    return [erase(services.url, user_id=user_id, thread_id=thread_id, tenant=tenant)]
