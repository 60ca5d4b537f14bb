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
    ("_remem", "threads", T)         "thread"        a copy of the thread's metadata with its    memory client
                                                     last activity: one search lists every thread
    ("_remem", "ingestions")         ingestion id    one ingestion: what it wrote, its undo       remem.ingestion

Ids in labels: a thread, user or tenant id may hold any text. LangGraph refuses namespace labels that
are empty or hold ``.`` or NUL, so :func:`escape_label` writes such an id as ``%`` followed by the id
with ``%``, ``.`` and NUL percent-encoded (``tenant.42.chat`` -> ``%tenant%2E42%2Echat``), and
:func:`unescape_label` reads it back exactly. Every other id is its own label, byte for byte, so data
stored before ids were escaped is found where it was; the one exception is an id that itself reads as an
escaped one (``%`` then an encoding of an id that needs escaping, e.g. ``%a%2Eb``), which is escaped
again so that no two ids share a label.

Tenants: every namespace is built by :func:`namespace`, which puts it under ``("tenants", tenant)``
when a tenant is given. Without one (the default) the namespaces are exactly the ones above, byte for
byte, so databases written before tenants existed keep working. Where an id is not a namespace (the
checkpointer's thread ids, the usage ledger's thread and user ids), a tenant's id is ``tenants:T:<id>``
(:func:`tenant_id`, read back by :func:`id_of_tenant`).

Tables (SQL) are named in :data:`TABLES`: the checkpointer's, the store's, the erasure journal and
registry, the one migration record (``remem_schema``), the version tables it replaces and the usage
ledger to come. Tenancy does not change table names: a tenant scopes rows (namespaces), not tables.
"""

from __future__ import annotations

from typing import Final

from remem.errors import ArgumentTypeError, ConfigError, RememUsageError

__all__ = [
    "CHECKPOINT_MIGRATIONS_TABLE",
    "CHECKPOINT_TABLES",
    "ERASURE_JOURNAL_TABLE",
    "ERASURE_REGISTRY_TABLE",
    "EXTRACTION_STATE_KEY",
    "INGESTION_INVALIDATED_KEY",
    "INGESTION_MEMORY_KEY",
    "INGESTION_MESSAGE_KEY",
    "INTERNAL_ROOT",
    "JOBS_TABLE",
    "RATE_LIMITS_TABLE",
    "SCHEMA_TABLE",
    "STOCK_CHECKPOINT_TABLES",
    "STORE_LEGACY_TABLES",
    "STORE_META_TABLE",
    "STORE_MIGRATIONS_TABLE",
    "STORE_TABLES",
    "STORE_TERMS_TABLE",
    "STORE_TERM_DOCS_TABLE",
    "STORE_VECTOR_BLOCKS_TABLE",
    "STORE_VECTOR_CHANGES_TABLE",
    "TABLES",
    "TENANTS_ROOT",
    "THREADS_ROOT",
    "THREAD_FENCES_TABLE",
    "THREAD_META_KEY",
    "USAGE_HOLDS_TABLE",
    "USAGE_LEDGER_TABLE",
    "USAGE_TOTALS_TABLE",
    "USERS_ROOT",
    "Namespace",
    "check_label",
    "chunk_key",
    "escape_label",
    "extraction_root",
    "extraction_state",
    "id_of_tenant",
    "ingestions_root",
    "is_tenant_id",
    "is_thread_messages",
    "namespace",
    "tenant_id",
    "thread_id_of",
    "thread_listing",
    "thread_listings_root",
    "thread_messages",
    "thread_meta",
    "thread_order",
    "thread_root",
    "thread_summaries",
    "threads_root",
    "unescape_label",
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
_INGESTIONS: Final = "ingestions"
_LISTINGS: Final = "threads"

# ----------------------------------------------------------------------------- keys

THREAD_META_KEY: Final = "thread"
EXTRACTION_STATE_KEY: Final = "state"
# What an ingestion (remem.ingestion) writes carries its id under these keys, so its undo finds it:
INGESTION_MESSAGE_KEY: Final = "remem_ingestion"  # in a thread message's metadata
INGESTION_MEMORY_KEY: Final = "ingestion"  # in a memory's value
INGESTION_INVALIDATED_KEY: Final = "invalidated_by_ingestion"  # in a memory an extraction run invalidated


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
STORE_VECTOR_CHANGES_TABLE: Final = "remem_vector_changes"  # counts of vector changes (PG: per namespace)
STORE_VECTOR_BLOCKS_TABLE: Final = "remem_vector_blocks"  # SQLite: a namespace's vectors packed many to a row
STORE_META_TABLE: Final = "remem_store_meta"  # the store's own records (which embedder made its vectors)
STORE_LEGACY_TABLES: Final = ("remem_fts", "remem_reindex")  # schema v1's FTS5 index; items queued by v3
STOCK_CHECKPOINT_TABLES: Final = ("checkpoints", "writes")  # LangGraph's stock SqliteSaver (not remem's)
SCHEMA_TABLE: Final = "remem_schema"  # the one migration record of every component (remem._migrate)
CHECKPOINT_MIGRATIONS_TABLE: Final = "remem_cp_migrations"  # read once by the migration runner, then kept
STORE_MIGRATIONS_TABLE: Final = "remem_store_migrations"  # likewise
ERASURE_JOURNAL_TABLE: Final = "remem_erasures"  # each erasure's plan and steps, never the erased text
ERASURE_REGISTRY_TABLE: Final = "remem_erasure_registry"  # namespaces and threads registered for a user
USAGE_LEDGER_TABLE: Final = "remem_usage"  # the usage ledger: one row per model call
USAGE_TOTALS_TABLE: Final = "remem_usage_totals"  # its running totals per thread, turn and user-day
USAGE_HOLDS_TABLE: Final = "remem_usage_holds"  # what calls in flight hold of those budgets, until settled
JOBS_TABLE: Final = "remem_jobs"  # the durable job queue (remem.jobs): background work, retried, parked
RATE_LIMITS_TABLE: Final = "remem_rate_limits"  # remem serve's per-key request buckets on PostgreSQL
THREAD_FENCES_TABLE: Final = "remem_thread_fences"  # each thread lease's fencing token (remem._lease)
TABLES: Final = frozenset(
    {
        *CHECKPOINT_TABLES,
        *STORE_TABLES,
        *STORE_LEGACY_TABLES,
        STORE_VECTOR_CHANGES_TABLE,
        STORE_VECTOR_BLOCKS_TABLE,
        STORE_META_TABLE,
        ERASURE_JOURNAL_TABLE,
        ERASURE_REGISTRY_TABLE,
        SCHEMA_TABLE,
        CHECKPOINT_MIGRATIONS_TABLE,
        STORE_MIGRATIONS_TABLE,
        USAGE_LEDGER_TABLE,
        USAGE_TOTALS_TABLE,
        USAGE_HOLDS_TABLE,
        JOBS_TABLE,
        RATE_LIMITS_TABLE,
        THREAD_FENCES_TABLE,
    }
)

# ----------------------------------------------------------------------------- namespaces


# ----------------------------------------------------------------------------- ids in labels

_ESCAPE: Final = "%"
_CODES: Final = {"%": "%25", ".": "%2E", "\x00": "%00"}
_CHARS: Final = {code: char for char, code in _CODES.items()}


def _quote(text: str) -> str:
    return "".join(_CODES.get(char, char) for char in text)


def _unquote(text: str) -> str | None:
    """The text :func:`_quote` made ``text`` from, or None if it made no such text."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == _ESCAPE:
            char = _CHARS.get(text[i : i + 3])
            if char is None:
                return None
            out.append(char)
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _needs_escape(text: str) -> bool:
    """Whether ``text`` cannot be its own label: LangGraph refuses it, or it reads as an escaped id."""
    while True:
        if not text or "." in text or "\x00" in text:
            return True
        if not text.startswith(_ESCAPE):
            return False
        inner = _unquote(text[1:])
        if inner is None:
            return False
        text = inner  # "%" + an encoding: escaped only if that encoding's text needed escaping


def escape_label(text: str) -> str:
    """The namespace label that stands for the id ``text`` (any text): ``text`` itself when LangGraph
    accepts it as a label and it does not read as an escaped id; else ``%`` and ``text`` with ``%``,
    ``.`` and NUL percent-encoded. :func:`unescape_label` reads it back; two ids never share a label."""
    if not isinstance(text, str):
        raise ConfigError(f"an id must be a text (str), got {type(text).__name__} {text!r:.80}")
    return _ESCAPE + _quote(text) if _needs_escape(text) else text


def unescape_label(label: str) -> str:
    """The id that :func:`escape_label` made ``label`` from."""
    if label.startswith(_ESCAPE):
        inner = _unquote(label[1:])
        if inner is not None and _needs_escape(inner):
            return inner
    return label


def namespace(*labels: str, tenant: str | None = None) -> Namespace:
    """The one builder of every namespace remem uses: ``labels``, under ``("tenants", tenant)`` if given
    (the tenant id escaped by :func:`escape_label`)."""
    if tenant is None:
        return labels
    if tenant == "":
        raise ConfigError("the tenant cannot be an empty text: give its id (e.g. 'acme') or none")
    return (TENANTS_ROOT, escape_label(tenant), *labels)


_TENANT_SEP = ":"  # not "." (an erasure makes a label of a thread id); never in a tenant name


def tenant_id(id_: str, *, tenant: str | None = None) -> str:
    """The checkpointer's thread id, or the usage ledger's thread or user id, of a tenant's ``id_``
    (``id_`` itself without a tenant)."""
    if tenant is None:
        return id_
    if not tenant or _TENANT_SEP in tenant:
        raise ConfigError(
            f"tenant {tenant!r} cannot be used: give a non-empty name without ':' (e.g. 'acme')"
        )
    return _TENANT_SEP.join((TENANTS_ROOT, tenant, id_))


def is_tenant_id(stored_id: str) -> bool:
    """Whether ``stored_id`` is some tenant's :func:`tenant_id` (``tenants:T:<id>``): a checkpoint thread
    or ledger id an untenanted scope matches by name only, never by what its metadata says."""
    head, sep, rest = stored_id.partition(_TENANT_SEP)
    return head == TENANTS_ROOT and bool(sep) and _TENANT_SEP in rest and not rest.startswith(_TENANT_SEP)


def id_of_tenant(stored_id: str, *, tenant: str | None = None) -> str | None:
    """The tenant's own id of a :func:`tenant_id`, or None when it is not this tenant's."""
    if tenant is None:
        return stored_id
    prefix = tenant_id("", tenant=tenant)
    return stored_id[len(prefix) :] if stored_id.startswith(prefix) else None


def threads_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every thread's data."""
    return namespace(THREADS_ROOT, tenant=tenant)


def thread_root(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """The prefix of one thread's data (metadata, order, messages, summaries)."""
    return namespace(THREADS_ROOT, escape_label(thread_id), tenant=tenant)


def thread_meta(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's metadata item (key :data:`THREAD_META_KEY`)."""
    return namespace(THREADS_ROOT, escape_label(thread_id), _META, tenant=tenant)


def thread_order(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's message ids in order, in chunks keyed by :func:`chunk_key`."""
    return namespace(THREADS_ROOT, escape_label(thread_id), _ORDER, tenant=tenant)


def thread_messages(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's raw turns, keyed by message id and indexed for recall."""
    return namespace(THREADS_ROOT, escape_label(thread_id), _MESSAGES, tenant=tenant)


def thread_summaries(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's summary revisions, keyed by :func:`chunk_key` of the revision."""
    return namespace(THREADS_ROOT, escape_label(thread_id), _SUMMARIES, tenant=tenant)


def is_thread_messages(ns: Namespace, *, tenant: str | None = None) -> bool:
    """Whether ``ns`` is some thread's :func:`thread_messages` namespace."""
    root = threads_root(tenant=tenant)
    return len(ns) == len(root) + 2 and ns[: len(root)] == root and ns[-1] == _MESSAGES


def thread_id_of(ns: Namespace, *, tenant: str | None = None) -> str | None:
    """The thread id of a namespace under :func:`threads_root` (``thread_root(T)`` or below it), else None."""
    root = threads_root(tenant=tenant)
    if len(ns) > len(root) and ns[: len(root)] == root:
        return unescape_label(ns[len(root)])
    return None


def users_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every user's data."""
    return namespace(USERS_ROOT, tenant=tenant)


def user_root(user_id: str, *, tenant: str | None = None) -> Namespace:
    """The prefix of one user's data."""
    return namespace(USERS_ROOT, escape_label(user_id), tenant=tenant)


def user_memories(user_id: str, *, tenant: str | None = None) -> Namespace:
    """A user's long-term memories, keyed by memory id."""
    return namespace(USERS_ROOT, escape_label(user_id), _MEMORIES, tenant=tenant)


def extraction_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every thread's extraction state."""
    return namespace(INTERNAL_ROOT, _EXTRACTION, tenant=tenant)


def extraction_state(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's extraction watermark (key :data:`EXTRACTION_STATE_KEY`)."""
    return namespace(INTERNAL_ROOT, _EXTRACTION, escape_label(thread_id), tenant=tenant)


def thread_listings_root(*, tenant: str | None = None) -> Namespace:
    """The prefix of every thread's :func:`thread_listing`."""
    return namespace(INTERNAL_ROOT, _LISTINGS, tenant=tenant)


def thread_listing(thread_id: str, *, tenant: str | None = None) -> Namespace:
    """A thread's row in the list of threads (key :data:`THREAD_META_KEY`): its metadata as stored, kept
    apart so that listing threads is one search, not a read per thread."""
    return namespace(INTERNAL_ROOT, _LISTINGS, escape_label(thread_id), tenant=tenant)


def ingestions_root(*, tenant: str | None = None) -> Namespace:
    """The ingestion journal (:mod:`remem.ingestion`), keyed by ingestion id."""
    return namespace(INTERNAL_ROOT, _INGESTIONS, tenant=tenant)


def check_label(value: str, what: str) -> str:
    """A thread or user id: any non-empty Unicode text without NUL (:func:`escape_label` puts it in namespace
    labels, so ``.`` and every other character are kept). The one check of ids: the memory client, the
    savers and ``run_turn`` (through the thread lease) all refuse the same ids with the same words."""
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{what} takes a text (str), e.g. {what}='support-42'; got {type(value).__name__} {value!r}"
        )
    if not value or "\x00" in value:
        raise RememUsageError(
            f"{what} {value!r} cannot be used: give a non-empty text without NUL characters "
            "(e.g. 'support-42' or 'maya@example.com')"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RememUsageError(
            f"{what} {value!r:.80} cannot be used: it holds a lone surrogate, which is not Unicode text; "
            "decode the id from its bytes with errors='strict' (or 'replace') before passing it"
        ) from None
    return value
