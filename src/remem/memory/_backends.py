"""Which store a memory URL opens. Drivers are imported only for the URL that needs them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from langgraph.store.base import BaseStore

from remem._url import parse_database_url
from remem.config import Settings
from remem.usage import Meter
from remem.usage.embeddings import MeteredEmbedder

__all__ = ["index_config", "open_store"]


def _embedder(settings: Settings) -> Any:
    if settings.embedder == "fake":
        from remem.testing import FakeEmbedder

        return FakeEmbedder()
    from remem.embeddings import default_embedder

    return default_embedder()


def index_config(settings: Settings, meter: Meter | None = None) -> dict[str, Any]:
    """The LangGraph index configuration for the configured embedder (messages index their ``content``);
    with ``meter``, each embedder batch is recorded in the usage ledger."""
    embedder = _embedder(settings)
    dims = int(embedder.dims)
    if meter is not None:
        embedder = MeteredEmbedder(embedder, meter, model=settings.embedder)
    return {"dims": dims, "embed": embedder, "fields": ["content"]}


def open_store(
    url: str, settings: Settings, *, meter: Meter | None = None
) -> tuple[BaseStore, list[Callable[[], None]]]:
    """The store at ``url`` and the functions that close what was opened for it.

    Any form :func:`remem._url.parse_database_url` accepts; it refuses the others with the list of forms.
    """
    if parse_database_url(url).kind == "memory":
        from langgraph.store.memory import InMemoryStore

        return InMemoryStore(index=index_config(settings, meter)), []  # type: ignore[arg-type]
    return _open_remem_store(url, settings, meter)


def _open_remem_store(
    url: str, settings: Settings, meter: Meter | None
) -> tuple[BaseStore, list[Callable[[], None]]]:
    from remem.store import open_store as open_remem_store

    stack = contextlib.ExitStack()
    try:
        store = stack.enter_context(open_remem_store(url, index=index_config(settings, meter)))
    except BaseException:
        stack.close()
        raise
    return store, [stack.close]
