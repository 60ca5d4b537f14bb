"""Where remem keeps what: every namespace, key and table name remem uses, and where a tenant goes.

This module is the contract all of remem's storage shares. The store layer stores any namespace and
knows none of these; the memory client, extraction, erasure and the agent tools build their namespaces
here, so that two parts that mean the same data always name it the same way.

Namespaces in a LangGraph ``BaseStore`` (T: a thread id, U: a user id)::

    namespace                        key             value                                   written by
    ("threads", T, "meta")           "thread"        thread metadata (user, counts, revision)  memory client
    ("threads", T, "order")          "%08d"          {"ids": [...]}: message ids in order      memory client
    ("threads", T, "messages")       message id      one raw turn; "content" is indexed        memory client,
                                                                                               extraction
    ("threads", T, "summaries")      "%08d"          one summary revision                      memory client
    ("users", U, "memories")         memory id       one long-term memory, with provenance     extraction,
                                                                                               memory tools
    ("_remem", "extraction", T)      "state"         the thread's extraction watermark         extraction

Tenants: every namespace is built by :func:`namespace`, which puts it under ``("tenants", tenant)``
when a tenant is given. Without one (the default) the namespaces are exactly the ones above, byte for
byte, so databases written before tenants existed keep working.

Tables (SQL) are named in :data:`TABLES`: the checkpointer's, the store's, the erasure journal and
registry, the one migration record (``remem_schema``), the version tables it replaces and the usage
ledger to come. Tenancy does not change table names: a tenant scopes rows (namespaces), not tables.
"""

from __future__ import annotations

from typing import Final

from remem.errors import ConfigError

__all__ = [
    "CHECKPOINT_MIGRATIONS_TABLE",
    "CHECKPOINT_TABLES",
    "ERASURE_JOURNAL_TABLE",
    "ERASURE_REGISTRY_TABLE",
    "EXTRACTION_STATE_KEY",
    "INTERNAL_ROOT",
    "SCHEMA_TABLE",
    "STOCK_CHECKPOINT_TABLES",
    "STORE_LEGACY_TABLES",
    "STORE_MIGRATIONS_TABLE",
    "STORE_TABLES",
    "STORE_TERMS_TABLE",
    "STORE_TERM_DOCS_TABLE",
    "TABLES",
    "TENANTS_ROOT",
    "THREADS_ROOT",
    "THREAD_META_KEY",
    "USAGE_LEDGER_TABLE",
    "USAGE_TOTALS_TABLE",
    "USERS_ROOT",
    "Namespace",
    "chunk_key",
    "extraction_root",
    "extraction_state",
    "is_thread_messages",
    "namespace",
    "thread_messages",
    "thread_meta",
    "thread_order",
    "thread_root",
    "thread_summaries",
    "threads_root",
    "user_memories",
    "user_root",
    "users_root",
]

Namespace = tuple[str, ...]

# ----------------------------------------------------------------------------- namespace labels

TENANTS_ROOT: Final = "tenants"
THREADS_ROOT: Final = "threads"
USERS_ROOT: Final = "users"
INTERNAL_ROOT: Final = "_remem"  # remem's own bookkeeping, never a user's data
_META: Final = "meta"
_ORDER: Final = "order"
_MESSAGES: Final = "messages"
_SUMMARIES: Final = "summaries"
_MEMORIES: Final = "memories"
_EXTRACTION: Final = "extraction"

# ----------------------------------------------------------------------------- keys

THREAD_META_KEY: Final = "thread"
EXTRACTION_STATE_KEY: Final = "state"


def chunk_key(n: int) -> str:
    """The key of the ``n``-th order chunk or summary revision: zero-padded, so keys sort as numbers."""
    return f"{n:08d}"


# ----------------------------------------------------------------------------- tables

CHECKPOINT_TABLES: Final = (
    "remem_cp_threads",
    "remem_cp_items",
    "remem_cp_lists",
    "remem_cp_checkpoints",
    "remem_cp_writes",
)
STORE_TABLES: Final = ("remem_ns", "remem_items", "remem_terms", "remem_vectors", "remem_term_docs")
STORE_TERMS_TABLE: Final = STORE_TABLES[2]  # the keyword index: one row per (word, item)
STORE_TERM_DOCS_TABLE: Final = STORE_TABLES[4]  # one row per indexed item: its length and words
STORE_LEGACY_TABLES: Final = ("remem_fts", "remem_reindex")  # schema v1's FTS5 index; items queued by v3
STOCK_CHECKPOINT_TABLES: Final = ("checkpoints", "writes")  # LangGraph's stock SqliteSaver (not remem's)
SCHEMA_TABLE: Final = "remem_schema"  # the one migration record of every component (remem._migrate)
CHECKPOINT_MIGRATIONS_TABLE: Final = "remem_cp_migrations"  # read once by the migration runner, then kept
STORE_MIGRATIONS_TABLE: Final = "remem_store_migrations"  # likewise
ERASURE_JOURNAL_TABLE: Final = "remem_erasures"  # each erasure's plan and steps, never the erased text
ERASURE_REGISTRY_TABLE: Final = "remem_erasure_registry"  # namespaces and threads registered for a user
USAGE_LEDGER_TABLE: Final = "remem_usage"  # the usage ledger: one row per model call
USAGE_TOTALS_TABLE: Final = "remem_usage_totals"  # its running totals per thread, turn and user-day
TABLES: Final = frozenset(
    {
        *CHECKPOINT_TABLES,
        *STORE_TABLES,
        *STORE_LEGACY_TABLES,
        ERASURE_JOURNAL_TABLE,
        ERASURE_REGISTRY_TABLE,
        SCHEMA_TABLE,
        CHECKPOINT_MIGRATIONS_TABLE,
        STORE_MIGRATIONS_TABLE,
        USAGE_LEDGER_TABLE,
        USAGE_TOTALS_TABLE,
    }
)

# ----------------------------------------------------------------------------- namespaces


def _check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not tenant or "." in tenant or "\x00" in tenant:
        raise ConfigError(
            f"tenant {tenant!r} cannot be used: give a non-empty text without '.' (e.g. 'acme')"
        )
    return tenant


def namespace(*labels: str, tenant: str | None = None) -> Namespace:
    """The one builder of every namespace remem uses: ``labels``, under ``("tenants", tenant)`` if given."""
    if tenant is None:
        return labels
    return (TENANTS_ROOT, _check_tenant(tenant), *labels)


def threads_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every thread's data."""
    return namespace(THREADS_ROOT, tenant=tenant)


def thread_root(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """The prefix of one thread's data (metadata, order, messages, summaries)."""
    return namespace(THREADS_ROOT, thread_id, tenant=tenant)


def thread_meta(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's metadata item (key :data:`THREAD_META_KEY`)."""
    return namespace(THREADS_ROOT, thread_id, _META, tenant=tenant)


def thread_order(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's message ids in order, in chunks keyed by :func:`chunk_key`."""
    return namespace(THREADS_ROOT, thread_id, _ORDER, tenant=tenant)


def thread_messages(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's raw turns, keyed by message id and indexed for recall."""
    return namespace(THREADS_ROOT, thread_id, _MESSAGES, tenant=tenant)


def thread_summaries(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's summary revisions, keyed by :func:`chunk_key` of the revision."""
    return namespace(THREADS_ROOT, thread_id, _SUMMARIES, tenant=tenant)


def is_thread_messages(ns: Namespace, *, tenant: str | None = None) -> bool:
    """Whether ``ns`` is some thread's :func:`thread_messages` namespace."""
    root = threads_root(tenant=tenant)
    return len(ns) == len(root) + 2 and ns[: len(root)] == root and ns[-1] == _MESSAGES


def users_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every user's data."""
    return namespace(USERS_ROOT, tenant=tenant)


def user_root(user_id: str, *, tenant: str | None = None) -> Namespace:
    """The prefix of one user's data."""
    return namespace(USERS_ROOT, user_id, tenant=tenant)


def user_memories(user_id: str, *, tenant: str | None = None) -> Namespace:
    """A user's long-term memories, keyed by memory id."""
    return namespace(USERS_ROOT, user_id, _MEMORIES, tenant=tenant)


def extraction_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every thread's extraction state."""
    return namespace(INTERNAL_ROOT, _EXTRACTION, tenant=tenant)


def extraction_state(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's extraction watermark (key :data:`EXTRACTION_STATE_KEY`)."""
    return namespace(INTERNAL_ROOT, _EXTRACTION, thread_id, tenant=tenant)
