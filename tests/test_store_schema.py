"""The store's schema on the one migration runner: carried over from its old version table, refused when newer.

``remem_store_migrations`` (one row, ``v = 0``) is what the release before the runner left; such a database
must open without its migrations being run again (they would fail: their tables exist), and keep its data.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from remem import _migrate
from remem.erasure import register_user_data, registered_user_data
from remem.erasure._journal import SCHEMA as JOURNAL
from remem.errors import SchemaTooNewError, StorageError
from remem.store import PostgresStore, SqliteStore
from remem.store import _schema as schema
from tests import matrix

NS = ("users", "maya", "memories")


@pytest.fixture(params=matrix.backend_params("sqlite", "postgres"))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[_migrate.Dialect, str]]:
    """(dialect, url) of a fresh database."""
    if request.param == "sqlite":
        yield "sqlite", f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield "postgres", str(request.getfixturevalue("pg_url"))


def _open(dialect: str, url: str) -> AbstractContextManager[Any]:
    if dialect == "sqlite":
        return SqliteStore.from_conn_string(url)
    return PostgresStore.from_conn_string(url)


def _raw(dialect: str, url: str) -> Any:
    """An autocommit connection of the driver, for the test to write what an older remem left."""
    if dialect == "sqlite":
        return sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    return psycopg.connect(url, autocommit=True)


def _sql(dialect: str, text: str) -> str:
    return text if dialect == "sqlite" else text.replace("?", "%s")


def _versions(dialect: str, url: str) -> list[int]:
    conn = _raw(dialect, url)
    try:
        rows = conn.execute(
            _sql(dialect, "SELECT version FROM remem_schema WHERE component = ? ORDER BY version"), ("store",)
        ).fetchall()
    finally:
        conn.close()
    return [int(r[0]) for r in rows]


def _old_setup(dialect: _migrate.Dialect, url: str, with_journal: bool) -> None:
    """What setup() of the release before the runner did: its own 0-based version table and migration 0
    (and the erasure journal's tables, which the erasure code created itself on first use)."""
    conn = _raw(dialect, url)
    try:
        real = "REAL" if dialect == "sqlite" else "double precision"
        conn.execute(f"CREATE TABLE remem_store_migrations (v INTEGER PRIMARY KEY, applied_at {real})")
        for text in schema.COMPONENT.migrations(dialect)[0]:
            conn.execute(text)
        conn.execute(
            _sql(dialect, "INSERT INTO remem_store_migrations (v, applied_at) VALUES (?, ?)"), (0, 1.0)
        )
        if with_journal:
            for text in JOURNAL.migrations(dialect)[0]:  # what the store's migration 2 created then
                conn.execute(text)
            conn.execute(
                "INSERT INTO remem_erasure_registry (kind, template) VALUES ('thread', 'chat-{user_id}')"
            )
    finally:
        conn.close()


def _as_schema_2(dialect: str, conn: Any) -> None:
    """Put back the keyword index of schema versions 1 and 2 (FTS5 on SQLite, a tsvector column on
    PostgreSQL) in place of version 3's, holding the items' texts as those versions indexed them."""
    conn.execute("DROP TABLE remem_terms")
    conn.execute("DROP TABLE remem_term_docs")
    if dialect == "sqlite":
        conn.execute("CREATE VIRTUAL TABLE remem_fts USING fts5 (text, tokenize = 'porter unicode61')")
        for item_id, value in conn.execute("SELECT id, value FROM remem_items").fetchall():
            text = " ".join(v for v in json.loads(value).values() if isinstance(v, str))
            conn.execute("INSERT INTO remem_fts (rowid, text) VALUES (?, ?)", (item_id, text))
    else:
        conn.execute("ALTER TABLE remem_items ADD COLUMN tsv tsvector NOT NULL DEFAULT ''::tsvector")
        conn.execute("UPDATE remem_items SET tsv = to_tsvector('english', value)")
        conn.execute("CREATE INDEX remem_items_tsv ON remem_items USING gin (tsv)")
    conn.execute("DELETE FROM remem_schema WHERE component = 'store' AND version >= 3")


def _as_released(dialect: str, url: str) -> None:
    """Turn a database this remem wrote into what the release before the runner left."""
    conn = _raw(dialect, url)
    try:
        _as_schema_2(dialect, conn)
        conn.execute("DELETE FROM remem_schema WHERE component = 'store'")
        conn.execute("CREATE TABLE remem_store_migrations (v INTEGER PRIMARY KEY, applied_at REAL)")
        conn.execute("INSERT INTO remem_store_migrations (v, applied_at) VALUES (0, 1)")
    finally:
        conn.close()


@pytest.mark.parametrize("with_journal", [False, True])
def test_a_database_set_up_by_the_old_runner_opens_without_running_migrations_again(
    backend: tuple[_migrate.Dialect, str], with_journal: bool
) -> None:
    dialect, url = backend
    _old_setup(dialect, url, with_journal)
    with _open(dialect, url) as store:
        store.setup()  # migration 1 again would fail: remem_ns exists
        store.put(NS, "k", {"text": "tea"})
        assert store.get(NS, "k").value == {"text": "tea"}
    assert _versions(dialect, url) == [1, 2, 3, 4, 5, 6, 7, 8]
    expected = (
        {"namespaces": [], "threads": ["chat-{user_id}"]}
        if with_journal
        else {"namespaces": [], "threads": []}
    )
    assert registered_user_data(url) == expected  # the journal's tables: kept, or created by migration 2


def test_data_written_before_the_runner_keeps_working(backend: tuple[_migrate.Dialect, str]) -> None:
    dialect, url = backend
    with _open(dialect, url) as store:
        store.put(NS, "k", {"text": "rivers"})
    register_user_data(url, namespaces=["crm.{user_id}"])
    _as_released(dialect, url)
    with _open(dialect, url) as store:
        assert store.get(NS, "k").value == {"text": "rivers"}
        store.put(NS, "k2", {"text": "more"})
        assert [h.key for h in store.search(NS, query="rivers")] == ["k"]  # re-indexed by migration 3
    assert registered_user_data(url)["namespaces"] == ["crm.{user_id}"]
    assert _versions(dialect, url) == [1, 2, 3, 4, 5, 6, 7, 8]
    with _open(dialect, url) as store:  # carried over once: the next setup reads remem_schema only
        store.setup()
    assert _versions(dialect, url) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_store_schema_from_a_newer_remem_is_refused(backend: tuple[_migrate.Dialect, str]) -> None:
    dialect, url = backend
    with _open(dialect, url) as store:
        store.put(NS, "k", {"text": "tea"})
    conn = _raw(dialect, url)
    try:
        conn.execute("INSERT INTO remem_schema (component, version, applied_at) VALUES ('store', 99, 0)")
    finally:
        conn.close()
    with pytest.raises(SchemaTooNewError, match="upgrade remem") as info, _open(dialect, url):
        pass  # from_conn_string sets the store up: opening it is refused
    assert isinstance(info.value, StorageError) and "version 99" in str(info.value)
    assert _versions(dialect, url) == [1, 2, 3, 4, 5, 6, 7, 8, 99]
