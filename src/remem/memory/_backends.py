"""Which store a memory URL opens. Drivers are imported only for the URL that needs them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from langgraph.store.base import BaseStore

from remem.config import Settings
from remem.errors import ConfigError

__all__ = ["index_config", "open_store"]


def _embedder(settings: Settings) -> Any:
    if settings.embedder == "fake":
        from remem.testing import FakeEmbedder

        return FakeEmbedder()
    from remem.embeddings import default_embedder

    return default_embedder()


def index_config(settings: Settings) -> dict[str, Any]:
    """The LangGraph index configuration for the configured embedder (messages index their ``content``)."""
    embedder = _embedder(settings)
    return {"dims": int(embedder.dims), "embed": embedder, "fields": ["content"]}


def open_store(url: str, settings: Settings) -> tuple[BaseStore, list[Callable[[], None]]]:
    """The store at ``url`` and the functions that close what was opened for it."""
    if url.startswith("memory://"):
        from langgraph.store.memory import InMemoryStore

        return InMemoryStore(index=index_config(settings)), []  # type: ignore[arg-type]
    if url.startswith("sqlite:"):
        return _open_remem_store(url, settings)
    if url.startswith(("postgresql://", "postgres://")):
        return _open_remem_store(url, settings)
    raise ConfigError(f"cannot open memory at {url!r}; use memory://, sqlite:///PATH or postgresql://...")


def _open_remem_store(url: str, settings: Settings) -> tuple[BaseStore, list[Callable[[], None]]]:
    from remem.store import open_store as open_remem_store

    stack = contextlib.ExitStack()
    try:
        store = stack.enter_context(open_remem_store(url, index=index_config(settings)))
    except BaseException:
        stack.close()
        raise
    return store, [stack.close]
