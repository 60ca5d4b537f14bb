"""The store's schema: one :class:`remem._migrate.Component` named ``store``, both dialects side by side.

Version 1 is the store's tables; version 2 created the erasure journal's, which are now
:mod:`remem.erasure`'s own schema component (the store knows no higher layer's tables): it is kept, empty,
so that the numbers stay; databases that ran it keep the tables, and the erasure component's ``IF NOT EXISTS``
finds them. Version 3 is the keyword index both dialects share (and a re-index of every item). Databases
written before this runner recorded version 0 in ``remem_store_migrations``; it is carried over as version 1.

PostgreSQL's ``remem_vectors`` is migration 4; whether its column is pgvector's ``vector(dims)`` depends on the
server and the index, so that choice is a component of its own, :func:`pgvector` (applied once, on a server
with the extension, by the first store opened with an index). Version 5 is SQLite's count of the vector
table's changes (PostgreSQL's count is v7's). Version 6 is SQLite's vector
blocks (:mod:`remem.store._blocks`): many vectors of a namespace in one row, for the matrix to load.
Version 7 is PostgreSQL's count of each namespace's vector changes, for the exact path's in-process matrix
(:mod:`remem.store._vector_cache`; SQLite has nothing to do: its count is v5's).
Version 8 is the store's own records (``remem_store_meta``): which embedder made its vectors
(:mod:`remem.store._embedder`), not an item, so no listing, search, stats or erasure sees it.
"""

from __future__ import annotations

from remem import _migrate
from remem.layout import (
    STORE_LEGACY_TABLES,
    STORE_META_TABLE,
    STORE_MIGRATIONS_TABLE,
    STORE_TABLES,
    STORE_TERM_DOCS_TABLE,
    STORE_TERMS_TABLE,
    STORE_VECTOR_BLOCKS_TABLE,
    STORE_VECTOR_CHANGES_TABLE,
)

__all__ = ["BLOCKS", "COMPONENT", "ITEMS", "META", "NS", "VECTORS", "statements"]

NS, ITEMS, _TERMS, VECTORS, _DOCS = STORE_TABLES
"""The store's table names, as remem.layout names them (every store module takes them from here)."""

_SQLITE_V1 = (
    f"CREATE TABLE {NS} (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, depth INTEGER NOT NULL)",
    f"CREATE TABLE {ITEMS} (id INTEGER PRIMARY KEY, ns_id INTEGER NOT NULL, key TEXT NOT NULL, "
    "value TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL, "
    "ttl_minutes REAL, UNIQUE (ns_id, key))",
    f"CREATE INDEX remem_items_expires ON {ITEMS} (expires_at) WHERE expires_at IS NOT NULL",
    "CREATE VIRTUAL TABLE remem_fts USING fts5 (text, tokenize = 'porter unicode61')",
    f"CREATE TABLE {VECTORS} (item_id INTEGER NOT NULL, ns_id INTEGER NOT NULL, path TEXT NOT NULL, "
    "text_hash BLOB NOT NULL, embedding BLOB NOT NULL, PRIMARY KEY (item_id, path))",
)

_POSTGRES_V1 = (
    f'CREATE TABLE {NS} (id bigserial PRIMARY KEY, path text COLLATE "C" NOT NULL UNIQUE, depth int NOT NULL)',
    f"CREATE TABLE {ITEMS} (id bigserial PRIMARY KEY, ns_id bigint NOT NULL, key text NOT NULL, "
    "value text NOT NULL, doc jsonb NOT NULL, tsv tsvector NOT NULL, created_at double precision NOT NULL, "
    "updated_at double precision NOT NULL, expires_at double precision, ttl_minutes double precision, "
    "UNIQUE (ns_id, key))",
    f"CREATE INDEX remem_items_tsv ON {ITEMS} USING gin (tsv)",
    f"CREATE INDEX remem_items_expires ON {ITEMS} (expires_at) WHERE expires_at IS NOT NULL",
)

_MOVED_V2: tuple[str, ...] = ()  # the erasure journal's tables, now remem.erasure's component

FTS_TABLE, REINDEX_TABLE = STORE_LEGACY_TABLES

# v3: one keyword index for both dialects (remem.store._keyword), replacing FTS5 and tsvector. The items'
# keyword texts are queued in REINDEX_TABLE (SQLite has them in FTS5; PostgreSQL kept only lexemes, so its
# items are re-read from their values); setup() indexes the queue in the same transaction and drops it.
_SQLITE_V3 = (
    f"CREATE TABLE {STORE_TERMS_TABLE} (term TEXT NOT NULL, item_id INTEGER NOT NULL, tf INTEGER NOT NULL, "
    "dl INTEGER NOT NULL, PRIMARY KEY (term, item_id)) WITHOUT ROWID",
    f"CREATE TABLE {STORE_TERM_DOCS_TABLE} (item_id INTEGER PRIMARY KEY, dl INTEGER NOT NULL, terms TEXT NOT NULL)",
    f"CREATE INDEX remem_term_docs_dl ON {STORE_TERM_DOCS_TABLE} (dl)",
    f"CREATE TABLE {REINDEX_TABLE} (item_id INTEGER PRIMARY KEY, text TEXT)",
    f"INSERT INTO {REINDEX_TABLE} (item_id, text) SELECT rowid, text FROM {FTS_TABLE}",
    f"DROP TABLE {FTS_TABLE}",
)
_POSTGRES_V3 = (
    f'CREATE TABLE {STORE_TERMS_TABLE} (term text COLLATE "C" NOT NULL, item_id bigint NOT NULL, '
    "tf int NOT NULL, dl int NOT NULL, PRIMARY KEY (term, item_id) INCLUDE (tf, dl))",
    f"CREATE TABLE {STORE_TERM_DOCS_TABLE} (item_id bigint PRIMARY KEY, dl int NOT NULL, terms text NOT NULL)",
    f"CREATE INDEX remem_term_docs_dl ON {STORE_TERM_DOCS_TABLE} (dl)",
    f"CREATE TABLE {REINDEX_TABLE} (item_id bigint PRIMARY KEY, text text)",
    f"INSERT INTO {REINDEX_TABLE} (item_id, text) SELECT id, NULL FROM {ITEMS}",
    "DROP INDEX remem_items_tsv",
    f"ALTER TABLE {ITEMS} DROP COLUMN tsv",
)

# v4: PostgreSQL's vector table, which setup() created itself before (IF NOT EXISTS: such databases have it).
# Its embeddings are float32 bytea, searched exactly; on a server with pgvector, PGVECTOR's migration turns
# the column of a still empty table into vector(dims) (a table holding bytea vectors keeps them).
_POSTGRES_V4 = (
    f"CREATE TABLE IF NOT EXISTS {VECTORS} (item_id bigint NOT NULL, ns_id bigint NOT NULL, "
    "path text NOT NULL, text_hash bytea NOT NULL, embedding bytea NOT NULL, PRIMARY KEY (item_id, path))",
    f"CREATE INDEX IF NOT EXISTS remem_vectors_ns ON {VECTORS} (ns_id)",
)

# v5 (SQLite): a count of remem_vectors' changes, moved by triggers in every writer's transaction (any
# connection, any version of remem that writes the file), so that a store's in-process vector matrix
# (remem.store.sqlite) can tell a commit elsewhere that changed no vector (a thread lease's fencing token,
# in the same file) from one that did, and keep the matrix instead of reading every vector again.
_CHANGES = STORE_VECTOR_CHANGES_TABLE
_SQLITE_V5 = (
    f"CREATE TABLE IF NOT EXISTS {_CHANGES} (id INTEGER PRIMARY KEY CHECK (id = 0), changes INTEGER NOT NULL)",
    f"INSERT OR IGNORE INTO {_CHANGES} (id, changes) VALUES (0, 0)",
    *(
        f"CREATE TRIGGER IF NOT EXISTS remem_vectors_{event.lower()} AFTER {event} ON {VECTORS} "
        f"BEGIN UPDATE {_CHANGES} SET changes = changes + 1 WHERE id = 0; END"
        for event in ("INSERT", "UPDATE", "DELETE")
    ),
)

# v6 (SQLite): a namespace's vectors packed many to a row (remem.store._blocks), so that loading the
# in-process matrix reads a few dozen rows, not one per vector. A block holds every vector of its namespace
# whose item id is in [lo, hi]; these triggers delete the blocks that hold an item whose vector is inserted,
# updated or deleted, in every writer's transaction (any version of remem), so that a block is never stale
# and an erased vector leaves none of its bytes in one. Item ids, not rowids: VACUUM may renumber rowids.
BLOCKS = STORE_VECTOR_BLOCKS_TABLE
_DROP_BLOCK = (
    f"DELETE FROM {BLOCKS} WHERE ns_id = {{row}}.ns_id AND hi >= {{row}}.item_id AND lo <= {{row}}.item_id"
)
_SQLITE_V6 = (
    f"CREATE TABLE IF NOT EXISTS {BLOCKS} (ns_id INTEGER NOT NULL, dims INTEGER NOT NULL, lo INTEGER NOT NULL, "
    "hi INTEGER NOT NULL, rows INTEGER NOT NULL, items BLOB NOT NULL, vectors BLOB NOT NULL, "
    "PRIMARY KEY (ns_id, dims, lo))",
    f"CREATE INDEX IF NOT EXISTS remem_vector_blocks_hi ON {BLOCKS} (ns_id, hi)",
    f"CREATE INDEX IF NOT EXISTS remem_vectors_ns_item ON {VECTORS} (ns_id, item_id)",
    f"CREATE TRIGGER IF NOT EXISTS remem_vector_blocks_on_insert AFTER INSERT ON {VECTORS} "
    f"BEGIN {_DROP_BLOCK.format(row='new')}; END",
    f"CREATE TRIGGER IF NOT EXISTS remem_vector_blocks_on_delete AFTER DELETE ON {VECTORS} "
    f"BEGIN {_DROP_BLOCK.format(row='old')}; END",
    f"CREATE TRIGGER IF NOT EXISTS remem_vector_blocks_on_update AFTER UPDATE ON {VECTORS} "
    f"BEGIN {_DROP_BLOCK.format(row='old')}; {_DROP_BLOCK.format(row='new')}; END",
)

# v7 (PostgreSQL): a count of each namespace's vector changes, for the exact path's in-process matrix
# (remem.store._vector_cache), moved by statement triggers in every writer's transaction (any process, any
# remem that writes the database). Per namespace, so that writers of different namespaces never wait for
# one another; moved once per transaction (``xact`` is the last writer's), so that a writer can tell from
# the row, in its own transaction, whether anyone else changed the namespace since its matrix read it.
_NEW, _OLD = "remem_new_vectors", "remem_old_vectors"
_EMBEDDING_TYPE = (
    "(SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
    f"'{VECTORS}'::regclass AND attname = 'embedding')"
)
_DROP_CHANGE_TRIGGERS = tuple(
    f"DROP TRIGGER IF EXISTS remem_vectors_changed_{event} ON {VECTORS}"
    for event in ("insert", "update", "delete")
)
_BUMP = (
    f"INSERT INTO {_CHANGES} AS c (ns_id, changes, xact) SELECT DISTINCT ns_id, 1, pg_current_xact_id() "
    "FROM {rows} ORDER BY ns_id ON CONFLICT (ns_id) DO UPDATE SET changes = c.changes + 1, "
    "xact = excluded.xact WHERE c.xact <> excluded.xact"  # (in ns_id order: writers lock rows alike)
)
_POSTGRES_V7 = (
    f"CREATE TABLE IF NOT EXISTS {_CHANGES} (ns_id bigint PRIMARY KEY, changes bigint NOT NULL, "
    "xact xid8 NOT NULL)",
    f"INSERT INTO {_CHANGES} (ns_id, changes, xact) SELECT DISTINCT ns_id, 1, pg_current_xact_id() "
    f"FROM {VECTORS} ON CONFLICT (ns_id) DO NOTHING",
    "CREATE OR REPLACE FUNCTION remem_vectors_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF TG_OP <> 'DELETE' THEN {_BUMP.format(rows=_NEW)}; END IF; "
    f"IF TG_OP <> 'INSERT' THEN {_BUMP.format(rows=_OLD)}; END IF; RETURN NULL; END $$",
    # (run again where a database's recorded versions were carried over: triggers have no IF NOT EXISTS)
    *_DROP_CHANGE_TRIGGERS,
    # only where the vectors are the exact path's bytea: pgvector's index needs no in-process matrix, so its
    # writers should neither fire the triggers nor queue on the count rows (pgvector() drops them too)
    f"DO $$ BEGIN IF {_EMBEDDING_TYPE} = 'bytea' THEN "
    f"CREATE TRIGGER remem_vectors_changed_insert AFTER INSERT ON {VECTORS} REFERENCING NEW TABLE AS {_NEW} "
    "FOR EACH STATEMENT EXECUTE FUNCTION remem_vectors_changed(); "
    f"CREATE TRIGGER remem_vectors_changed_update AFTER UPDATE ON {VECTORS} REFERENCING OLD TABLE AS {_OLD} "
    f"NEW TABLE AS {_NEW} FOR EACH STATEMENT EXECUTE FUNCTION remem_vectors_changed(); "
    f"CREATE TRIGGER remem_vectors_changed_delete AFTER DELETE ON {VECTORS} REFERENCING OLD TABLE AS {_OLD} "
    "FOR EACH STATEMENT EXECUTE FUNCTION remem_vectors_changed(); END IF; END $$",
)

# v8 (both): the store's own records, one row per name: "embedder" is the identity of the embedder that made
# the store's vectors (remem.embeddings.EmbedderIdentity as JSON), written with the first vector write (a
# store written before v8 is recorded when it is next opened with an index; see remem.store._embedder).
META = STORE_META_TABLE
_V8 = (f"CREATE TABLE IF NOT EXISTS {META} (name TEXT PRIMARY KEY, value TEXT NOT NULL)",)

COMPONENT = _migrate.Component(
    "store",
    # SQLite's vector table is in v1
    sqlite=(_SQLITE_V1, _MOVED_V2, _SQLITE_V3, (), _SQLITE_V5, _SQLITE_V6, (), _V8),
    postgres=(_POSTGRES_V1, _MOVED_V2, _POSTGRES_V3, _POSTGRES_V4, (), (), _POSTGRES_V7, _V8),
    legacy=_migrate.Legacy(STORE_MIGRATIONS_TABLE, "v", offset=1),  # it numbered its first migration 0
)


def statements(dialect: _migrate.Dialect) -> list[str]:
    """Every schema statement of ``dialect`` in order (LangGraph's stores expose theirs as ``MIGRATIONS``)."""
    return [text for migration in COMPONENT.migrations(dialect) for text in migration]


def pgvector(dims: int) -> _migrate.Component:
    """The migration that makes an empty ``remem_vectors`` a pgvector column of ``dims`` (PostgreSQL only:
    SQLite has nothing to do). A table that already holds vectors, or a vector column, is left as it is."""
    convert = (
        f"DO $$ BEGIN IF {_EMBEDDING_TYPE} = 'bytea' AND NOT EXISTS "
        f"(SELECT 1 FROM {VECTORS}) THEN ALTER TABLE {VECTORS} ALTER COLUMN embedding TYPE vector({int(dims)}) "
        f"USING NULL; {'; '.join(_DROP_CHANGE_TRIGGERS)}; END IF; END $$"
    )
    return _migrate.Component("store_pgvector", sqlite=((),), postgres=((convert,),))
