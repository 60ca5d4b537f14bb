"""The one migration runner (remem._migrate) and the checkpoint schema on it: carry-over of the old version
table, refusal of a newer schema, each migration with its record, and read-only opening that creates nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.rows import dict_row

from remem import _migrate, _statements
from remem._lease import carry_lease, thread_lease
from remem.checkpoint import PostgresSaver, SqliteSaver, checkpointer_from_url, list_threads
from remem.checkpoint._sql import SCHEMA
from remem.errors import ConfigError, NotFoundError, SchemaTooNewError, StorageError
from tests.savers import ids_as_given

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
TOY_V1 = ("CREATE TABLE toy (a INTEGER)",)
TOY_V2 = ("ALTER TABLE toy ADD COLUMN b INTEGER", "CREATE INDEX toy_b ON toy (b)")

ALL_VERSIONS = list(range(1, SCHEMA.latest + 1))  # the schema module's own count: a bump edits no test


def toy(*migrations: tuple[str, ...], legacy: _migrate.Legacy | None = None) -> _migrate.Component:
    return _migrate.Component("toy", sqlite=migrations, postgres=migrations, legacy=legacy)


def recorded(conn: Any, component: str) -> list[int]:
    sql = "SELECT version FROM remem_schema WHERE component = ? ORDER BY version"
    if isinstance(conn, sqlite3.Connection):
        return [r[0] for r in conn.execute(sql, (component,))]
    return [r[0] for r in conn.execute(sql.replace("?", "%s"), (component,)).fetchall()]


def sqlite_conn(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_migrations_apply_in_order_once_each(tmp_path: Path) -> None:
    conn = sqlite_conn(tmp_path / "a.db")
    assert _migrate.run_sqlite(conn, toy(TOY_V1)) == 1
    assert _migrate.run_sqlite(conn, toy(TOY_V1)) == 1  # idempotent: nothing applied twice
    assert _migrate.run_sqlite(conn, toy(TOY_V1, TOY_V2)) == 2
    conn.execute("INSERT INTO toy (a, b) VALUES (1, 2)")
    assert recorded(conn, "toy") == [1, 2]


def test_a_failing_migration_leaves_neither_its_changes_nor_its_record(tmp_path: Path) -> None:
    conn = sqlite_conn(tmp_path / "a.db")
    _migrate.run_sqlite(conn, toy(TOY_V1))
    broken = ("CREATE TABLE half_done (x)", "THIS IS NOT SQL")
    with pytest.raises(sqlite3.Error):
        _migrate.run_sqlite(conn, toy(TOY_V1, broken))
    assert recorded(conn, "toy") == [1]
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchall() == []


def test_components_share_one_table_and_do_not_see_each_other(tmp_path: Path) -> None:
    conn = sqlite_conn(tmp_path / "a.db")
    _migrate.run_sqlite(conn, toy(TOY_V1, TOY_V2))
    other = _migrate.Component("other", sqlite=[("CREATE TABLE other (x)",)], postgres=[()])
    assert _migrate.run_sqlite(conn, other) == 1
    assert (recorded(conn, "toy"), recorded(conn, "other")) == ([1, 2], [1])


def test_a_legacy_version_table_is_carried_over(tmp_path: Path) -> None:
    conn = sqlite_conn(tmp_path / "a.db")
    conn.execute("CREATE TABLE toy_migrations (v INTEGER PRIMARY KEY)")  # 0-based, like the old store's
    conn.execute("INSERT INTO toy_migrations VALUES (0)")
    conn.execute(TOY_V1[0])
    legacy = _migrate.Legacy("toy_migrations", "v", offset=1)
    assert _migrate.run_sqlite(conn, toy(TOY_V1, TOY_V2, legacy=legacy)) == 2  # v1 is not run again
    assert recorded(conn, "toy") == [1, 2]


def test_a_newer_schema_is_refused_by_upgrade_and_check(tmp_path: Path) -> None:
    conn = sqlite_conn(tmp_path / "a.db")
    _migrate.run_sqlite(conn, toy(TOY_V1, TOY_V2))
    with pytest.raises(SchemaTooNewError, match="upgrade remem") as info:
        _migrate.run_sqlite(conn, toy(TOY_V1))
    assert isinstance(info.value, StorageError) and "version 2" in str(info.value)
    with pytest.raises(SchemaTooNewError, match="upgrade remem"):
        _statements.drive(
            _migrate.check(toy(TOY_V1), "sqlite"), lambda s: conn.execute(s.sql, s.params).fetchall()
        )
    assert recorded(conn, "toy") == [1, 2]


@pytest.mark.postgres
def test_postgres_runner_locks_and_reads_any_row_factory(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as conn:
        assert _migrate.run_postgres(conn, toy(TOY_V1)) == 1
        assert _migrate.run_postgres(conn, toy(TOY_V1, TOY_V2)) == 2
        conn.execute("INSERT INTO toy (a, b) VALUES (1, 2)")
        rows = conn.execute("SELECT version FROM remem_schema WHERE component = 'toy'").fetchall()
        assert sorted(r["version"] for r in rows) == [1, 2]
        with pytest.raises(SchemaTooNewError, match="upgrade remem"):
            _migrate.run_postgres(conn, toy(TOY_V1))


# The checkpoint schema on the runner.


def _step(saver: Any) -> Any:
    tup = saver.get_tuple(CONFIG)
    assert tup is not None
    return tup.metadata["step"]


def _as_released(conn: Any, dialect: str) -> None:
    """Turn a fresh checkpoint database into what remem 0.1 left: its own remem_cp_migrations table."""
    ph = "?" if dialect == "sqlite" else "%s"
    ids_as_given(conn, ph)  # v8 came later
    conn.execute("DROP TABLE remem_thread_fences")  # v4 came later
    conn.execute("DROP INDEX remem_cp_items_digest")  # v3 came later
    conn.execute("DROP INDEX remem_cp_checkpoints_seq")  # v2's insertion order came later
    conn.execute("ALTER TABLE remem_cp_checkpoints DROP COLUMN seq")
    conn.execute("DROP TABLE remem_schema")
    conn.execute("CREATE TABLE remem_cp_migrations (version INTEGER PRIMARY KEY)")
    conn.execute(f"INSERT INTO remem_cp_migrations (version) VALUES ({ph})", (1,))


def test_a_database_of_the_released_format_keeps_working(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    with SqliteSaver.from_conn_string(db) as saver:
        saver.put(CONFIG, empty_checkpoint(), {"step": 7}, {})
        _as_released(saver.conn, "sqlite")
    with SqliteSaver.from_conn_string(db) as saver:
        assert _step(saver) == 7
        assert recorded(saver.conn, "checkpoint") == ALL_VERSIONS
        _write_after_upgrade(saver)


@pytest.mark.postgres
def test_released_postgres_database_keeps_working(pg_url: str) -> None:
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.put(CONFIG, empty_checkpoint(), {"step": 7}, {})
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _as_released(conn, "postgres")
    with PostgresSaver.from_conn_string(pg_url) as saver:
        assert _step(saver) == 7
        _write_after_upgrade(saver)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert recorded(conn, "checkpoint") == ALL_VERSIONS


def _write_after_upgrade(saver: Any) -> None:
    """A checkpoint written after migration 2 numbered the old ones follows them, whatever its id says;
    one written under a lease after migration 4 checks the lease's fencing token."""
    older = {**empty_checkpoint(), "id": "00000000-0000-6000-8000-000000000000"}  # a clock far behind
    saver.put(CONFIG, older, {"step": 8}, {})
    assert _step(saver) == 8
    with thread_lease(saver.lease_target, CONFIG["configurable"]["thread_id"], scope="checkpoint") as lease:
        saver.put(carry_lease(CONFIG, lease), empty_checkpoint(), {"step": 9}, {})
    assert _step(saver) == 9


@pytest.mark.parametrize("create", [True, False])
def test_a_checkpoint_database_from_a_newer_remem_is_refused(tmp_path: Path, create: bool) -> None:
    db = tmp_path / "cp.db"
    with SqliteSaver.from_conn_string(db) as saver:
        saver.setup()
        saver.conn.execute("INSERT INTO remem_schema VALUES ('checkpoint', 99, 0)")
    with pytest.raises(SchemaTooNewError, match="upgrade remem"), checkpointer_from_url(db, create=create):
        pass


@pytest.mark.postgres
def test_postgres_checkpoints_from_a_newer_remem_are_refused(pg_url: str) -> None:
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO remem_schema VALUES ('checkpoint', 99, 0)")
    with pytest.raises(SchemaTooNewError, match="upgrade remem"), checkpointer_from_url(pg_url):
        pass


# Read-only opening.


def _tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def test_reading_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "remem.db"
    with (
        pytest.raises(NotFoundError, match="there is no database at"),
        checkpointer_from_url(missing, create=False),
    ):
        pass
    assert not missing.parent.exists()


def test_reading_a_file_without_tables_says_so_and_creates_none(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    with (
        pytest.raises(NotFoundError, match="has no remem checkpoints; check --db"),
        checkpointer_from_url(db, create=False),
    ):
        pass
    assert _tables(db) == []


def test_reading_a_stock_database_points_to_the_import(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver as StockSaver

    db = tmp_path / "stock.db"
    with StockSaver.from_conn_string(str(db)) as stock:
        stock.setup()
    before = _tables(db)
    with pytest.raises(NotFoundError, match="remem import"), checkpointer_from_url(db, create=False):
        pass
    assert _tables(db) == before


def test_a_read_only_saver_reads_and_refuses_to_write(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    with checkpointer_from_url(db) as saver:
        saver.put(CONFIG, empty_checkpoint(), {"step": 1}, {})
    mtime = db.stat().st_mtime_ns
    with checkpointer_from_url(f"sqlite:///{db}", create=False) as reader:
        assert list_threads(reader) == ["t"]
        assert reader.get_tuple(CONFIG) is not None
        with pytest.raises(ConfigError, match="read-only"):
            reader.put(CONFIG, empty_checkpoint(), {"step": 2}, {})
    assert db.stat().st_mtime_ns == mtime


@pytest.mark.postgres
def test_reading_an_empty_postgres_database_creates_no_table(pg_url: str) -> None:
    with (
        pytest.raises(NotFoundError, match="has no remem checkpoints"),
        checkpointer_from_url(pg_url, create=False),
    ):
        pass
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    assert tables == []
    with checkpointer_from_url(pg_url) as saver:
        saver.put(CONFIG, empty_checkpoint(), {"step": 1}, {})
    with checkpointer_from_url(pg_url, create=False) as reader:
        assert list_threads(reader) == ["t"]
        assert isinstance(reader, PostgresSaver) and not isinstance(reader.conn, psycopg.Connection)
        with reader.conn.connection() as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TABLE sneaky (x int)")  # the server itself refuses writes


async def test_async_read_only_opening_reads_and_creates_nothing(tmp_path: Path) -> None:
    from remem.checkpoint import acheckpointer_from_url

    missing = tmp_path / "typo.db"
    with pytest.raises(NotFoundError, match="there is no database at"):
        async with acheckpointer_from_url(missing, create=False):
            pass
    assert not missing.exists()
    db = tmp_path / "cp.db"
    async with acheckpointer_from_url(db) as saver:
        await saver.aput(CONFIG, empty_checkpoint(), {"step": 1}, {})
    async with acheckpointer_from_url(db, create=False) as reader:
        assert (await reader.aget_tuple(CONFIG)) is not None
        with pytest.raises(ConfigError, match="read-only"):
            await reader.aput(CONFIG, empty_checkpoint(), {"step": 2}, {})


@given(st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=6))
@settings(max_examples=30, deadline=None)
def test_any_sequence_of_releases_ends_with_each_migration_once(releases: list[int]) -> None:
    # Each release knows the first n migrations; running them in any order (older ones refused once a
    # newer ran) leaves every migration up to the newest applied exactly once, in order.
    steps = [(f"CREATE TABLE t{i} (x INTEGER)",) for i in range(1, 5)]
    conn = sqlite3.connect(":memory:", isolation_level=None)
    newest = 0
    for known in releases:
        if known < newest:
            with pytest.raises(SchemaTooNewError):
                _migrate.run_sqlite(conn, toy(*steps[:known]))
            continue
        assert _migrate.run_sqlite(conn, toy(*steps[:known])) == known
        newest = known
        assert recorded(conn, "toy") == list(range(1, known + 1))
