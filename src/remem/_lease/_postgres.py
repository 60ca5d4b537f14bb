"""PostgreSQL leases: a session advisory lock on a connection kept for the lease. See :mod:`remem._lease`.

Connections given back are kept idle for the next lease, for the savers and stores that retain them
(:func:`retain_idle_connections`). A child of ``fork`` never uses nor closes its parent's connections:
closing (or collecting) one would end the parent's session."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from remem._lease._fence import bump_postgres, lease_key
from remem._lease_target import LeaseTarget
from remem.errors import StorageError

if TYPE_CHECKING:
    from remem._lease._core import Held

__all__ = [
    "advisory_key",
    "close_idle_connections",
    "connection",
    "lock",
    "retain_idle_connections",
    "try_lock",
]

_IDLE_PG_CONNECTIONS = 4  # kept per server for the next lease


class _Pool:
    """This process's idle lease connections, and who keeps them."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.idle: dict[str, list[Any]] = {}
        self.retained: dict[str, int] = {}  # conninfo -> savers and stores that keep idle lease connections


_pool = _Pool()
_inherited: list[Any] = []  # the parent's lease connections, never used nor closed in a child


def _reset_after_fork() -> None:
    # A child holds none of its parent's leases, and must not share its sockets: closing (or collecting) an
    # inherited connection would end the parent's session, so they are kept unused.
    global _pool
    _inherited.append(_pool.idle)
    _pool = _Pool()


os.register_at_fork(after_in_child=_reset_after_fork)


def advisory_key(scope: str, thread_id: str) -> int:
    return lease_key(scope, thread_id)


def connection(conninfo: str, reuse: bool) -> tuple[Any, bool]:
    """A connection for a lease (an idle one when ``reuse``), and whether it was idle."""
    import psycopg

    with _pool.mutex:
        idle = _pool.idle.get(conninfo)
        if reuse and idle:
            return idle.pop(), True
    try:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10, application_name="remem-lease")
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot reach PostgreSQL for the thread's lease ({type(exc).__name__}); "
            "check that the server is up and retry"
        ) from exc
    return conn, False


def _give_back(conninfo: str, conn: Any) -> None:
    with _pool.mutex:
        if _pool.retained.get(conninfo) and not conn.closed:
            idle = _pool.idle.setdefault(conninfo, [])
            if len(idle) < _IDLE_PG_CONNECTIONS:
                idle.append(conn)
                return
    conn.close()


def retain_idle_connections(target: LeaseTarget) -> None:
    """Keep lease connections to ``target``'s server open between leases, for the next one, until the same
    number of :func:`close_idle_connections` calls. Only what remem opens and closes itself (a saver or
    store of ``from_conn_string``) retains them: on a connection or pool the caller made, each lease's
    connection is closed when the lease is given back, so no remem session outlives the caller's own (the
    caller can close everything and drop the database)."""
    if target.kind == "postgres":
        with _pool.mutex:
            _pool.retained[target.where] = _pool.retained.get(target.where, 0) + 1


def close_idle_connections(target: LeaseTarget) -> None:
    """One :func:`retain_idle_connections` fewer; with none left, close the lease connections kept idle for
    ``target``'s server: nothing of remem's stays connected to its database (which can then be dropped)."""
    if target.kind != "postgres":
        return
    with _pool.mutex:
        left = _pool.retained.pop(target.where, 0) - 1
        if left > 0:
            _pool.retained[target.where] = left
            return
        idle = _pool.idle.pop(target.where, [])
    for conn in idle:
        conn.close()


def try_lock(conn: Any, key: int, wait: float) -> bool:
    import psycopg

    left_ms = int(wait * 1000)
    try:
        if left_ms <= 0:
            return bool(conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0])
        # the server's own queue: fair, and woken the moment the holder lets go
        conn.execute(f"SET lock_timeout = {left_ms}")
        conn.execute("SELECT pg_advisory_lock(%s)", [key])
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def bump(conn: Any, keys: list[int]) -> list[int]:
    """Move the fencing tokens of leases just taken on ``conn`` on (:mod:`._fence`); their new values."""
    import psycopg

    try:
        # the wait for the token's row (behind a write under way) is not cut short by the lock's timeout
        conn.execute("SET lock_timeout = 0")
        return bump_postgres(conn, keys)
    except psycopg.Error as exc:
        raise StorageError(
            f"PostgreSQL failed while taking the thread's lease ({type(exc).__name__}); retry"
        ) from exc


def lock(target: LeaseTarget, scope: str, thread_id: str, wait: float, fence: bool = True) -> Held | None:
    """The advisory lock, waiting for it in the server's queue up to ``wait`` seconds (0: one try);
    ``fence``: move its fencing token on (else its one write does)."""
    import psycopg

    key = advisory_key(scope, thread_id)
    reuse = True
    while True:
        conn, was_idle = connection(target.where, reuse)
        try:
            got = try_lock(conn, key, wait)
            break
        except psycopg.Error as exc:
            conn.close()
            if was_idle:  # a connection left idle may have died with a server restart: once more, new
                reuse = False
                continue
            raise StorageError(
                f"PostgreSQL failed while taking the thread's lease ({type(exc).__name__}); retry"
            ) from exc
    if not got:
        _give_back(target.where, conn)
        return None
    try:
        token = bump(conn, [key])[0] if fence else None
    except BaseException:
        conn.close()  # the server drops the lock with the connection
        raise

    def release() -> None:
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])
        except psycopg.Error:
            conn.close()  # the server drops the lock with the connection
            return
        _give_back(target.where, conn)

    def alive() -> bool:
        # A session keeps its advisory locks until it unlocks them or ends: a live session holds it.
        try:
            conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return not conn.closed

    return release, alive, token
