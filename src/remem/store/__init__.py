"""Long-term memory: LangGraph stores on SQLite and Postgres with keyword, vector and hybrid search.

Stores (all complete LangGraph ``BaseStore``s, usable as ``graph.compile(store=...)``)::

    from remem.store import SqliteStore
    from remem.embeddings import default_embedder

    with SqliteStore.from_conn_string("memory.db", index={"dims": 384, "embed": default_embedder()}) as store:
        store.put(("users", "u1", "memories"), "m1", {"text": "Prefers green tea", "kind": "preference"})
        hits = store.search(("users", "u1"), query="what does she drink?", limit=5)

``SqliteStore`` / ``AsyncSqliteStore`` (stdlib sqlite3, exact NumPy vectors) and ``PostgresStore`` /
``AsyncPostgresStore`` (full-text search; pgvector with an HNSW index where the extension exists, an exact
path where it does not). ``index`` takes LangGraph's documented keys: ``dims``, ``embed``, ``fields``; a field
path written ``keyword_only("speaker")`` (``"keyword:speaker"``) goes into the item's keyword document but gets
no vector of its own (in ``index["fields"]`` or a put's ``index=``).
``ttl`` takes LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
``sweep_interval_minutes``); ``sweep_ttl()`` and ``start_ttl_sweeper()`` delete expired items.

Search (the function the memory client builds on)::

    hybrid_search(store, namespace_prefix, query, *, mode="hybrid", filter=None, limit=10, offset=0)
        -> list[ScoredItem]

``mode`` is ``"hybrid"`` (keyword and vector scores fused, see ``remem.store._fusion``), ``"keyword"`` or
``"vector"``. A hit's ``score`` means what it means on LangGraph's stores: with an index, the hit's vector
similarity under ``index["distance_type"]`` (cosine by default, the value InMemoryStore reports; the inner
product; the negative L2 distance), so an app's ``score > 0.3`` keeps working; without an index, its keyword
relevance mapped into [0, 1] (BM25 as s / (1 + s), the same on every backend). Hybrid hits come in
fused order, so their scores need not descend; ``scores`` keeps every signal (``keyword``, ``keyword_rank``,
``vector``, ``vector_rank``, ``fused``) and ``mode`` says which search ran (a store with no index searches
by keyword and says so). ``hybrid_search`` takes any ``BaseStore``: a stock store is asked through its
``search``. ``filter`` uses LangGraph's filter syntax (equality, nested dicts, dotted paths such as
``"user.level"``, ``$eq $ne $gt $gte $lt $lte``). ``store.search(...)`` with a query uses the store's
``search_mode`` (hybrid by default; keyword when the store has no index).

The store stores any namespace and knows none of remem's own: which namespace holds what (a user's
memories, a thread's turns, extraction watermarks) is named in ``remem.layout``.

Deleting: ``store.delete_items(prefixes, keys=..., matching=...)`` deletes items with their vectors,
keyword-index rows and cached embeddings in one transaction and returns a ``DeleteReport``;
``store.compact(wait=...)`` then makes the deleted bytes leave the files, checked (a ``Compaction``). What a
user's or a thread's data is, is decided above the store (:mod:`remem.erasure`). Labels, keys and filter
keys are validated before any SQL is built; every value is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.store.base import BaseStore, SearchItem

from remem._url import parse_database_url
from remem.errors import InvalidFilterError, NamespaceError
from remem.store._base import RememStoreBase
from remem.store._compact import Compaction
from remem.store._core import KEYWORD_ONLY, ScoredItem, SearchMode, keyword_only
from remem.store._delete import DeleteReport, Statement, Statements, check_delete
from remem.store.sqlite import AsyncSqliteStore, SqliteStore

if TYPE_CHECKING:
    from remem.store.postgres import AsyncPostgresStore, PostgresStore


def __getattr__(name: str) -> Any:
    # The Postgres stores load psycopg; import them only when asked for.
    if name in ("PostgresStore", "AsyncPostgresStore"):
        from remem.store import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module 'remem.store' has no attribute {name!r}")


__all__ = [
    "KEYWORD_ONLY",
    "AsyncPostgresStore",
    "AsyncSqliteStore",
    "Compaction",
    "DeleteReport",
    "InvalidFilterError",
    "NamespaceError",
    "PostgresStore",
    "RememStoreBase",
    "ScoredItem",
    "SearchMode",
    "SqliteStore",
    "Statement",
    "Statements",
    "ahybrid_search",
    "check_delete",
    "hybrid_search",
    "keyword_only",
    "open_store",
]


def hybrid_search(
    store: BaseStore,
    namespace_prefix: tuple[str, ...],
    query: str,
    *,
    mode: SearchMode = "hybrid",
    filter: Mapping[str, Any] | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[ScoredItem]:
    """Scored items under ``namespace_prefix`` for ``query`` (see the module docstring).

    Any LangGraph ``BaseStore`` works: a store that is not remem's is asked through its own ``search``
    (what it supports: vector search with an index, else a listing), and each hit says which it was.
    """
    if isinstance(store, RememStoreBase):
        return store.hybrid_search(
            namespace_prefix, query, mode=mode, filter=filter, limit=limit, offset=offset
        )
    hits = store.search(
        namespace_prefix, query=query, filter=dict(filter) if filter else None, limit=limit, offset=offset
    )
    return [_scored(hit) for hit in hits]


async def ahybrid_search(
    store: BaseStore,
    namespace_prefix: tuple[str, ...],
    query: str,
    *,
    mode: SearchMode = "hybrid",
    filter: Mapping[str, Any] | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[ScoredItem]:
    """Async version of :func:`hybrid_search`."""
    if isinstance(store, RememStoreBase):
        return await store.ahybrid_search(
            namespace_prefix, query, mode=mode, filter=filter, limit=limit, offset=offset
        )
    hits = await store.asearch(
        namespace_prefix, query=query, filter=dict(filter) if filter else None, limit=limit, offset=offset
    )
    return [_scored(hit) for hit in hits]


def _scored(hit: SearchItem) -> ScoredItem:
    """A stock store's hit as remem's: scored hits came from its vector index, unscored ones from a listing."""
    scored = hit.score is not None
    return ScoredItem(
        hit.namespace,
        hit.key,
        hit.value,
        hit.created_at,
        hit.updated_at,
        score=hit.score,
        mode="vector" if scored else "list",
        scores={"vector": float(hit.score)} if hit.score is not None else {},
    )


@contextmanager
def open_store(
    url: str | Path,
    *,
    index: Mapping[str, Any] | None = None,
    read_only: bool = False,
    pool_size: int | None = None,
) -> Iterator[RememStoreBase]:
    """Open a store from a URL: ``postgresql://...``, ``sqlite:///path``, a file path, ``:memory:`` or ``memory://``.

    ``read_only=True`` is for commands that only read (as ``checkpointer_from_url(create=False)``): SQLite
    opens with ``mode=ro``, PostgreSQL with read-only transactions; nothing is created, writes are refused,
    and a missing file or missing store tables raise :class:`~remem.errors.NotFoundError` saying what to do.
    ``pool_size``: on PostgreSQL, a pool of up to that many connections, so that calls from several
    threads run side by side (default: one connection, one call at a time); SQLite keeps its one connection.
    """
    if parse_database_url(url).kind == "postgres":
        from remem.store.postgres import PostgresStore

        pool = None if pool_size is None else {"min_size": 1, "max_size": _check_pool_size(pool_size)}
        with PostgresStore.from_conn_string(
            str(url), index=index, read_only=read_only, pool_config=pool
        ) as pg:
            yield pg
    else:
        with SqliteStore.from_conn_string(url, index=index, read_only=read_only) as lite:
            yield lite


def _check_pool_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        from remem.errors import ConfigError  # imported here: remem.store exports no ConfigError

        raise ConfigError(f"pool_size takes a whole number of connections, at least 1; got {size!r}")
    return size
