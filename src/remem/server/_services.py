"""What the endpoints share: the memory, the store, the checkpointer and the ledger of one database.

One :class:`Services` per server process, opened at start-up and closed at shutdown. A tenant's view
(:meth:`Services.memory_for`, :meth:`Services.store_for`) is built once and kept, so that its lease
target is found once; every call on it is scoped to the tenant at the storage layer
(:mod:`remem.server._tenancy`).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore

from remem.config import Settings
from remem.memory import Memory
from remem.server._tenancy import TenantMeter, scoped_store

__all__ = ["Principal", "Services"]


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the key's id (``"anonymous"`` without keys), its tenant and role."""

    key_id: str
    tenant: str | None
    admin: bool = False


STORE_POOL_SIZE = 10
"""The most connections a server process's store opens on PostgreSQL (as many as its checkpointer's
pool, ``PostgresSaver.from_conn_string``'s ``pool_size``): requests run side by side up to that many,
then wait for a connection; ``/metrics`` shows both pools. SQLite keeps one connection."""


class Services:
    """The database's memory, store and checkpointer, and each tenant's view of them."""

    def __init__(self, url: str, settings: Settings) -> None:
        from remem.checkpoint import checkpointer_from_url

        self.url = url
        self.settings = settings
        self._stack = contextlib.ExitStack()
        try:
            self.memory = Memory.from_url(url, settings=settings, pool_size=STORE_POOL_SIZE)
            self._stack.callback(self.memory.close)
            self.store: BaseStore = self.memory.store
            self.saver: Any = self._stack.enter_context(checkpointer_from_url(url))
        except BaseException:
            self._stack.close()
            raise
        self._views: dict[str, tuple[BaseStore, Memory]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._stack.close()

    def reload(self) -> None:
        """Read the configuration again (``remem serve`` on SIGHUP): the summaries' chat model is built
        anew from it, so a model key rotated in its file (``REMEM_LLM_API_KEY_FILE``) or in ``remem.toml``
        is used from the next request on, with no restart. Requests already running finish with the model
        they started with. The database, the embedder and the pools stay as they are (a new database URL
        needs a restart). A configuration that cannot be read raises and changes nothing."""
        from remem.config import load_settings
        from remem.models import chat_model_from_settings
        from remem.summarize import summarizer_for

        settings = load_settings()
        summarizer = summarizer_for(
            chat_model_from_settings(settings), settings.summary_max_tokens, settings.summary_prompt
        )
        with self._lock:
            self.settings = settings
            self.memory.summarizer = summarizer
            for _, memory in self._views.values():
                memory.summarizer = summarizer

    def pools(self) -> dict[str, Any]:
        """The connection pools of the store and the checkpointer, by name: PostgreSQL's checkpointer (and
        the store, when it runs on a pool); none on SQLite."""
        found: dict[str, Any] = {}
        for name, owner in (("store", self.store), ("checkpoint", self.saver)):
            with contextlib.suppress(AssertionError):  # a store without a connection yet
                pool = getattr(owner, "conn", None)
                if callable(getattr(pool, "get_stats", None)):
                    found[name] = pool
        return found

    def _view(self, tenant: str) -> tuple[BaseStore, Memory]:
        with self._lock:
            view = self._views.get(tenant)
            if view is None:
                base = self.memory
                store = scoped_store(self.store, tenant)
                memory = Memory(
                    store,
                    summarizer=base.summarizer,
                    token_counter=base.token_counter,
                    context_summary_update_frequency=base.context_summary_update_frequency,
                    thread_lease_timeout=base.thread_lease_timeout,
                    meter=None if base.meter is None else TenantMeter(base.meter, tenant),
                )
                view = self._views[tenant] = (store, memory)
            return view

    def memory_for(self, tenant: str | None) -> Memory:
        """The memory client as ``tenant`` sees it (the whole database without a tenant)."""
        return self.memory if tenant is None else self._view(tenant)[1]

    def store_for(self, tenant: str | None) -> BaseStore:
        """The store as ``tenant`` sees it."""
        return self.store if tenant is None else self._view(tenant)[0]
