"""Which store a memory URL opens. Drivers are imported only for the URL that needs them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from remem._url import parse_database_url
from remem.config import Settings
from remem.errors import ConfigError
from remem.memory._plans import MESSAGE_FIELDS
from remem.memory._records import CONTEXT_FIELD
from remem.usage import Meter
from remem.usage.embeddings import MeteredEmbedder

__all__ = ["index_config", "indexes_repeated_texts", "message_fields", "open_store"]


def _embedder(settings: Settings) -> Any:
    if settings.embedder == "fake":
        from remem.embeddings import HashingEmbedder

        return HashingEmbedder()
    if settings.embedder == "e5":
        from remem.embeddings import CachedEmbedder, E5Embedder

        return CachedEmbedder(E5Embedder())
    if settings.embedder == "auto":
        from remem.embeddings import AutoEmbedder

        return AutoEmbedder()
    from remem.embeddings import default_embedder

    return default_embedder()


def index_config(settings: Settings, meter: Meter | None = None, embedder: Any = None) -> dict[str, Any]:
    """The LangGraph index configuration for ``embedder`` (default: the configured one; messages index
    their ``content``); with ``meter``, each embedder batch is recorded in the usage ledger."""
    name = settings.embedder if embedder is None else type(embedder).__name__
    embedder = _embedder(settings) if embedder is None else embedder
    dims = getattr(embedder, "dims", None) or len(embedder.embed_query("dimension probe"))
    dims = int(dims)
    if meter is not None:
        embedder = MeteredEmbedder(embedder, meter, model=name)
    return {"dims": dims, "embed": embedder, "fields": ["content"]}


class _InMemoryStore(InMemoryStore):
    """LangGraph's ``InMemoryStore``, but a batch may index the same text twice.

    Stock ``InMemoryStore`` embeds each distinct text of a batch once, then pairs the embeddings with
    every place a text was found and raises ValueError ("Number of embeddings ... does not match") when
    a text occurs twice: two messages saying "ok", or two messages of the same day (each message's
    ``context`` field holds its date). Here each embedding goes to every place its text occurs."""

    def _insertinmem_store(
        self,
        to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]],
        embeddings: list[list[float]],
    ) -> None:
        for embedding, places in zip(embeddings, to_embed.values(), strict=True):
            for namespace, key, path in places:
                self._vectors[namespace][key][path] = embedding


def indexes_repeated_texts(store: BaseStore) -> bool:
    """Whether ``store`` can index a batch in which a text occurs twice (stock ``InMemoryStore`` with an
    index cannot: see :class:`_InMemoryStore`)."""
    return (
        not isinstance(store, InMemoryStore)
        or isinstance(store, _InMemoryStore)
        or store.index_config is None
    )


def message_fields(store: BaseStore) -> tuple[str, ...]:
    """What the index holds of a message on ``store``: its text, and who said it when (``CONTEXT_FIELD``)
    in the keyword document only (``MESSAGE_FIELDS``) where the store has one; on a store without
    keyword search (``InMemoryStore``) the context gets a vector of its own, the only way its words are
    found there; on one that fails on a text given twice in a batch (stock ``InMemoryStore`` with an
    index), the text alone."""
    if getattr(store, "supports_keyword_only", False):
        return MESSAGE_FIELDS
    return ("content", CONTEXT_FIELD) if indexes_repeated_texts(store) else ("content",)


def open_store(
    url: str,
    settings: Settings,
    *,
    meter: Meter | None = None,
    embedder: Any = None,
    pool_size: int | None = None,
) -> tuple[BaseStore, list[Callable[[], None]]]:
    """The store at ``url`` and the functions that close what was opened for it (``pool_size``: as
    :func:`remem.store.open_store`'s).

    Any form :func:`remem._url.parse_database_url` accepts; it refuses the others with the list of forms.
    """
    if parse_database_url(url).kind == "memory":
        return _InMemoryStore(index=index_config(settings, meter, embedder)), []  # type: ignore[arg-type]
    return _open_remem_store(url, settings, meter, embedder, pool_size)


def _open_remem_store(
    url: str, settings: Settings, meter: Meter | None, embedder: Any, pool_size: int | None
) -> tuple[BaseStore, list[Callable[[], None]]]:
    from remem.store import open_store as open_remem_store

    stack = contextlib.ExitStack()
    try:
        index = index_config(settings, meter, embedder)
        store = stack.enter_context(open_remem_store(url, index=index, pool_size=pool_size))
    except BaseException:
        stack.close()
        raise
    return store, [stack.close]


def open_embed_queue(url: str, settings: Settings, owned: list[Callable[[], Any]]) -> Any:
    """With ``embed_turns = "queue"``, the job queue in the database at ``url`` (closed with ``owned``), where
    new turns wait to be embedded and indexed by a worker; else None."""
    if settings.embed_turns != "queue":
        return None
    if parse_database_url(url).kind == "memory":
        for closer in reversed(owned):
            closer()
        raise ConfigError(
            "embed_turns = 'queue' needs a database a worker can reach (sqlite:/// or postgresql://); "
            "memory:// keeps its queue in this process"
        )
    from remem.jobs import open_queue

    queue = open_queue(url)
    owned.append(queue.close)
    return queue
