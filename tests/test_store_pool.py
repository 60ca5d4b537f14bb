"""A PostgreSQL store on a pool (``open_store(url, pool_size=N)``): calls from several threads run side by
side, each on a connection of its own, where a store on one connection runs them one at a time."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import psycopg
import pytest

from remem.errors import ConfigError
from remem.store import open_store


def _blocked_on_a_lock(admin: psycopg.Connection[object]) -> bool:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return bool(row and row[0])


def _wait_until_blocked(admin: psycopg.Connection[object], put: concurrent.futures.Future[None]) -> None:
    for _ in range(600):  # a hang guard, not a measure: the put reaches the row lock at once
        if _blocked_on_a_lock(admin):
            return
        assert not put.done(), put.exception()
        time.sleep(0.05)
    raise AssertionError("the put never waited for the row lock")


@pytest.fixture
def held_row(pg_url: str) -> Iterator[psycopg.Connection[object]]:
    """A session holding the row lock of item ("a", "held"): a put of it waits; reads do not."""
    with open_store(pg_url) as store:
        store.put(("a",), "held", {"v": 0})
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT 1 FROM remem_items WHERE key = 'held' FOR UPDATE")
        yield holder
        holder.rollback()


@pytest.mark.postgres
def test_a_read_on_a_pool_is_served_while_another_call_waits_in_the_database(
    pg_url: str, held_row: psycopg.Connection[object]
) -> None:
    with (
        open_store(pg_url, pool_size=4) as store,
        psycopg.connect(pg_url, autocommit=True) as admin,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        store.put(("a",), "free", {"v": 1})
        put = pool.submit(store.put, ("a",), "held", {"v": 2})
        _wait_until_blocked(admin, put)
        # a store on one connection would queue this read behind the blocked put
        read = concurrent.futures.ThreadPoolExecutor(1).submit(store.get, ("a",), "free")
        item = read.result(timeout=30)
        assert item is not None and item.value == {"v": 1}
        assert not put.done()
        stats = store.conn.get_stats()  # type: ignore[union-attr]
        assert stats["pool_size"] >= 2 and stats["pool_available"] < stats["pool_size"]
        held_row.rollback()
        put.result(timeout=30)
        assert store.get(("a",), "held").value == {"v": 2}  # type: ignore[union-attr]


@pytest.mark.postgres
def test_without_a_pool_the_store_runs_one_call_at_a_time(
    pg_url: str, held_row: psycopg.Connection[object]
) -> None:
    """The contrast that makes the test above mean something: one connection, the read waits."""
    with (
        open_store(pg_url) as store,
        psycopg.connect(pg_url, autocommit=True) as admin,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        put = pool.submit(store.put, ("a",), "held", {"v": 2})
        _wait_until_blocked(admin, put)
        read = pool.submit(store.get, ("a",), "held")
        with pytest.raises(concurrent.futures.TimeoutError):
            read.result(timeout=0.5)
        held_row.rollback()
        put.result(timeout=30)
        assert read.result(timeout=30).value == {"v": 2}  # type: ignore[union-attr]


@pytest.mark.postgres
@pytest.mark.parametrize("size", [0, -1, 1.5, True, "4"])
def test_a_pool_size_that_is_not_a_whole_number_of_connections_is_refused(pg_url: str, size: object) -> None:
    with pytest.raises(ConfigError, match="pool_size"), open_store(pg_url, pool_size=size):  # type: ignore[arg-type]
        pass


@pytest.mark.postgres
def test_compaction_on_a_pool_rewrites_the_tables_on_a_borrowed_connection(pg_url: str) -> None:
    with open_store(pg_url, pool_size=2) as store:
        store.put(("a",), "gone", {"text": "erase me"})
        store.delete_items([("a",)])
        compaction = store.compact(wait=10)
        assert compaction.done, compaction.detail
        assert store.search(("a",)) == []


def test_a_pool_size_for_a_server_url_is_refused() -> None:
    from remem import Memory

    with pytest.raises(ConfigError, match="pool_size is for a database URL"):
        Memory.from_url("http://127.0.0.1:8420", pool_size=2)
