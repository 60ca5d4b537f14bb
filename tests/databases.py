"""Fresh databases on the machine's PostgreSQL, made ahead and dropped behind by a thread of their own.

A test that needs PostgreSQL gets an empty database of its own, dropped after it, as before. What changed
is who waits: ``CREATE DATABASE`` and ``DROP DATABASE ... WITH (FORCE)`` took 0.1-1.5 s each on a busy
2-core machine (the drop waits for the database's backends to end and for every backend to let go of
its files), about 0.6 s a test over ~400 PostgreSQL tests. Here one thread per test process creates the
next database while a test runs and drops the last one after it, so a test never waits for either
unless the thread is behind. Every database is still created empty (from ``template1``, as before) and
used by one test only; what is left is dropped when the session ends (or, for the embedded pgvector
server, before it stops).

Its sessions commit with ``synchronous_commit = off``: a commit does not wait for its WAL to reach the
disk (2.5-4 ms a commit on this machine against 0.05 ms, and a test commits tens to hundreds of times).
What every session and every client sees is the same: a committed row is visible at once and survives
any client process, killed or not; only a crash of the PostgreSQL server itself could lose the last
commits, and no test crashes these servers (those that stop a server start their own, not from here).
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from typing import Any

import psycopg

_STOP = object()
AHEAD = 2  # databases made ahead: a test shorter than a create does not wait for the next one


class FreshDatabases:
    """Empty databases on one server: :meth:`take` one (created ahead), :meth:`give_back` it (dropped
    behind); :meth:`close` drops what is left."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self._jobs: queue.Queue[Any] = queue.Queue()  # a name to drop, None to create one, _STOP
        self._made: queue.Queue[str | BaseException] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self.failed: list[str] = []  # the databases a drop failed on, and why

    def take(self) -> str:
        """The name of an empty database no other test has used (the connection error, raised)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fresh-databases", daemon=True)
            self._thread.start()
            for _ in range(AHEAD):
                self._jobs.put(None)
        made = self._made.get(timeout=300)
        self._jobs.put(None)  # the next test's, made while this one runs (or tried again)
        if isinstance(made, BaseException):
            raise made
        return made

    def give_back(self, name: str) -> None:
        self._jobs.put(name)

    def close(self) -> None:
        """Drop every database made here (the spares too) and end the thread."""
        if self._thread is None:
            return
        self._jobs.put(_STOP)
        self._thread.join(120)
        self._thread = None

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                break
            try:
                if job is None:
                    name = "remem_t_" + uuid.uuid4().hex[:12]
                    self._execute(f'CREATE DATABASE "{name}"')
                    self._execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
                    self._made.put(name)
                else:
                    self._execute(f'DROP DATABASE IF EXISTS "{job}" WITH (FORCE)')
            except Exception as exc:  # a create's is the waiting test's; a drop's is told at the end
                if job is None:
                    self._made.put(exc)
                else:
                    self.failed.append(f"{job}: {exc}")
        while not self._made.empty():  # the spares nobody took
            spare = self._made.get()
            if isinstance(spare, str):
                try:
                    self._execute(f'DROP DATABASE IF EXISTS "{spare}" WITH (FORCE)')
                except psycopg.Error as exc:
                    self.failed.append(f"{spare}: {exc}")
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _execute(self, statement: str) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)
        try:
            self._conn.execute(statement)
        except psycopg.OperationalError:  # the session was lost: once more on a new one
            self._conn.close()
            self._conn = psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)
            self._conn.execute(statement)


_pools: dict[str, FreshDatabases] = {}
_inherited: list[Any] = []  # a forked child's copies of its parent's pools: never used nor closed


def fresh_databases(admin_url: str) -> FreshDatabases:
    if admin_url not in _pools:
        _pools[admin_url] = FreshDatabases(admin_url)
    return _pools[admin_url]


def close(admin_url: str) -> list[str]:
    """Close the pool of ``admin_url``'s server (before the server stops); the drops that failed."""
    pool = _pools.pop(admin_url, None)
    if pool is None:
        return []
    pool.close()
    return pool.failed


def close_all() -> list[str]:
    """Close every pool; the drops that failed."""
    failed = []
    for pool in _pools.values():
        pool.close()
        failed.extend(pool.failed)
    _pools.clear()
    return failed


def _reset_after_fork() -> None:
    # A forked child has no thread to serve its parent's pools, and closing (or collecting) their
    # connection would end the parent's session: they are kept, unused.
    _inherited.append(dict(_pools))
    _pools.clear()


os.register_at_fork(after_in_child=_reset_after_fork)
