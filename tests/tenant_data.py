"""A tenant's extracted data written as a served app writes it, and what of it is left in the raw store.

Shared by the server tests on SQLite and PostgreSQL: memories extracted from a thread (the real
:class:`~remem.extraction.MemoryExtractor` with a scripted model, on the tenant's store), its extraction
state and the indexed turns, all in the tenant's slot ``("tenants", T, ...)``.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import HumanMessage

from remem.extraction import MemoryExtractor
from remem.server._tenancy import TenantStore
from remem.store import open_store
from remem.testing import ScriptedChatModel


def extract(url: str, tenant: str, thread_id: str, user_id: str, text: str) -> None:
    """One turn of ``user_id`` in ``thread_id`` extracted into a memory, in ``tenant``'s slot."""
    reply = json.dumps({"memories": [{"kind": "fact", "text": text, "confidence": 0.9}]})
    with open_store(url) as store:
        result = MemoryExtractor(TenantStore(store, tenant), ScriptedChatModel(replies=[reply])).run(
            [HumanMessage(content=text, id=f"{thread_id}-turn")], user_id=user_id, thread_id=thread_id
        )
    assert result.added, result


def tenant_items(url: str, tenant: str) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """Every item under ``("tenants", tenant)``, read from the shared store itself."""
    found: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
    with open_store(url) as store:
        while True:
            page = store.search(("tenants", tenant), limit=500, offset=len(found))
            found.extend((tuple(i.namespace), i.key, dict(i.value)) for i in page)
            if len(page) < 500:
                return found


def of_thread(url: str, tenant: str, thread_id: str) -> list[tuple[tuple[str, ...], str]]:
    """The items of ``tenant`` that belong to ``thread_id``: in a namespace of it, or extracted from it."""
    return [
        (ns, key)
        for ns, key, value in tenant_items(url, tenant)
        if thread_id in ns or value.get("thread_id") == thread_id
    ]


def of_user(url: str, tenant: str, user_id: str) -> list[tuple[tuple[str, ...], str]]:
    """The items of ``tenant`` that name ``user_id``: under its namespace, or with it as their user."""
    return [
        (ns, key)
        for ns, key, value in tenant_items(url, tenant)
        if user_id in ns or value.get("user_id") == user_id
    ]
