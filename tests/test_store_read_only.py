"""Read-only opening (``open_store(url, read_only=True)``): nothing created or written, clear errors when
the file or the store is missing; and PostgreSQL's vector table made by the migration list."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import psycopg
import pytest

from remem.errors import ConfigError, NotFoundError
from remem.store import PostgresStore, SqliteStore, hybrid_search, open_store
from remem.testing import FakeEmbedder

NS = ("users", "u1", "memories")
TTL = {"default_ttl": 60.0, "refresh_on_read": True}


def _digest(path: Path) -> str:
    data = b"".join(Path(str(path) + s).read_bytes() for s in ("", "-wal") if Path(str(path) + s).exists())
    return hashlib.sha256(data).hexdigest()


def test_a_read_only_sqlite_store_reads_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    with SqliteStore.from_conn_string(path, ttl=TTL) as store:  # type: ignore[arg-type]
        store.put(NS, "k", {"text": "green tea in the morning"})
    before = _digest(path)
    with open_store(path, read_only=True) as ro:
        assert ro.get(NS, "k") is not None  # a read with refresh_on_read: the expiry is not pushed back
        assert [h.key for h in hybrid_search(ro, ("users",), "tea", mode="keyword")] == ["k"]
        assert ro.stats()["items"] == 1
        with pytest.raises(ConfigError, match="read-only"):
            ro.put(NS, "k2", {"text": "refused"})
        with pytest.raises(ConfigError, match="read-only"):
            ro.sweep_ttl()
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith("-shm")) == ["ro.db", "ro.db-wal"]


def test_read_only_says_what_is_missing_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(NotFoundError, match="no database at"), open_store(missing, read_only=True):
        pass
    assert not missing.exists()
    empty = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(empty).execute("CREATE TABLE unrelated (x)").connection.close()
    with pytest.raises(NotFoundError, match="has no remem store"), open_store(empty, read_only=True):
        pass
    tables = sqlite3.connect(empty).execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("unrelated",)]


@pytest.mark.postgres
def test_a_read_only_postgres_store_refuses_writes_on_the_server(pg_url: str) -> None:
    with pytest.raises(NotFoundError, match="has no remem store"), open_store(pg_url, read_only=True):
        pass
    with psycopg.connect(pg_url) as conn:  # the check created nothing
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'remem%'").fetchone() == (0,)
    with PostgresStore.from_conn_string(pg_url) as store:
        store.put(NS, "k", {"text": "green tea"})
    with open_store(pg_url, read_only=True) as ro:
        assert ro.get(NS, "k") is not None
        with pytest.raises(ConfigError, match="read-only"):
            ro.put(NS, "k2", {"text": "refused"})
        assert isinstance(ro, PostgresStore)
        with ro._cursor() as cur, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cur.execute("DELETE FROM remem_items")  # the session itself is read-only
    with PostgresStore.from_conn_string(pg_url) as store:
        assert store.stats()["items"] == 1


def _vector_column(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'remem_vectors'::regclass AND attname = 'embedding'"
        ).fetchone()
    assert row is not None
    return str(row[0])


def _components(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT component, version FROM remem_schema ORDER BY 1, 2").fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


@pytest.mark.postgres
def test_the_vector_table_is_a_migration(pg_url: str) -> None:
    with PostgresStore.from_conn_string(pg_url) as store:  # no index: the table is there all the same
        store.put(NS, "k", {"text": "x"})
    assert _vector_column(pg_url) == "bytea"
    assert _components(pg_url) == [("store", v) for v in range(1, 9)]
    index: dict[str, Any] = {"dims": 8, "embed": FakeEmbedder(8), "fields": ["text"]}
    with PostgresStore.from_conn_string(pg_url, index=index) as store:  # PG15 here has no pgvector
        store.put(NS, "v", {"text": "a vector"})
        assert store.vector_kind == "exact"
        assert [h.key for h in store.search(NS, query="a vector", limit=1)] == ["v"]


@pytest.mark.pgvector
def test_pgvector_turns_an_empty_vector_table_into_vector_columns_once(pgvector_url: str) -> None:
    with PostgresStore.from_conn_string(pgvector_url) as store:
        store.put(NS, "k", {"text": "x"})
    assert _vector_column(pgvector_url) == "bytea"
    index: dict[str, Any] = {"dims": 8, "embed": FakeEmbedder(8), "fields": ["text"]}
    with PostgresStore.from_conn_string(pgvector_url, index=index) as store:
        assert store.vector_kind == "pgvector"
        store.put(NS, "v", {"text": "a vector"})
        assert [h.key for h in store.search(NS, query="a vector", limit=1)] == ["v"]
    assert _vector_column(pgvector_url) == "vector(8)"
    assert ("store_pgvector", 1) in _components(pgvector_url)
