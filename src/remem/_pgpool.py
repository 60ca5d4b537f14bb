"""The check every remem PostgreSQL pool runs on a connection it hands out (store and checkpointer, sync and
async): one that costs no round trip.

psycopg_pool's own ``check_connection`` sends an empty query each time (a round trip per store batch or
checkpoint call). A connection a restarted (or crashed) server broke has already been told so: the server
closed its socket, or said why first, so the socket has something to read where an idle connection has
nothing. :func:`check` asks the socket without waiting, and only then runs the stock check, which drops the
broken connection (the pool opens another). Nothing is sent on a broken connection, so no write can run twice
or half; one the network lost silently fails its call, as it would right after a ping.
"""

from __future__ import annotations

import select
from typing import Any

__all__ = ["acheck", "check"]


def _has_input(conn: Any) -> bool:
    """Whether an idle connection's socket has bytes (or its end) waiting: never so on a healthy one."""
    if conn.closed:
        return True
    try:
        fd = conn.fileno()
    except Exception:  # a connection psycopg already knows is gone
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # pragma: no cover - Windows


def check(conn: Any) -> None:
    """A ``check=`` for a ``ConnectionPool``: raises on a connection the server has closed or spoken on."""
    if _has_input(conn):
        from psycopg_pool import ConnectionPool

        ConnectionPool.check_connection(conn)  # consumes a notice; raises on a closed socket


async def acheck(conn: Any) -> None:
    """Async version of :func:`check`, for an ``AsyncConnectionPool``."""
    if _has_input(conn):
        from psycopg_pool import AsyncConnectionPool

        await AsyncConnectionPool.check_connection(conn)
