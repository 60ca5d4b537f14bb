"""Where a thread's lease is held: a :class:`LeaseTarget`, made from the connection that reaches the database.

Each lease function takes its target as a parameter; nothing is looked up from an owner's attributes and
nothing is remembered per owner. remem's savers and stores make theirs from the connection they hold
(``saver.lease_target``); :func:`remem.checkpoint.checkpointer_lease_target` and
:func:`remem.store.store_lease_target` map any checkpointer or store, the stock ones included, to theirs.
The constructors below go by the connection's type: a ``sqlite3`` (or ``aiosqlite``) connection, a
psycopg connection or pool, a conninfo, or nothing shared with another process.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["LeaseTarget", "is_loaded_instance"]


def _loaded(module: str, name: str) -> type | None:
    """``module.name`` if ``module`` is imported (an object of a class not imported cannot exist)."""
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def is_loaded_instance(obj: Any, classes: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``obj`` is an instance of one of ``classes`` ((module, name) pairs), without importing any."""
    return any(
        (cls := _loaded(module, name)) is not None and isinstance(obj, cls) for module, name in classes
    )


def _main_file(rows: list[Any]) -> str:
    for row in rows:
        if row[1] == "main":
            return str(row[2] or "")
    return ""


_POOLS = (("psycopg_pool", "ConnectionPool"), ("psycopg_pool", "AsyncConnectionPool"))


@dataclass(frozen=True)
class LeaseTarget:
    """Where a thread's lease is held: ``kind`` sqlite (a file path), postgres (a conninfo) or process."""

    kind: Literal["sqlite", "postgres", "process"]
    where: str
    label: str  # what a message may show (never a password)

    def __repr__(self) -> str:  # a conninfo may hold a password
        return f"LeaseTarget(kind={self.kind!r}, label={self.label!r})"

    @classmethod
    def in_process(cls, owner: Any) -> LeaseTarget:
        """A lease no other process can see: for ``owner``'s data, which lives in this process only."""
        return cls("process", f"{type(owner).__name__}@{id(owner):x}", "this process")

    @classmethod
    def sqlite_file(cls, path: str, owner: Any) -> LeaseTarget:
        """The SQLite file at ``path``; an empty path (``:memory:``, a temporary database) is ``owner``'s alone."""
        if not path:
            return cls.in_process(owner)
        real = os.path.realpath(path)
        return cls("sqlite", real, real)

    @classmethod
    def sqlite(cls, conn: sqlite3.Connection, *, where: str = "the SQLite database") -> LeaseTarget:
        """The file ``conn`` has open (``where``: how an error names a closed connection)."""
        try:
            rows = conn.execute("PRAGMA database_list").fetchall()
        except sqlite3.ProgrammingError as exc:  # closed: the saver's `with` block has ended
            from remem._sqlite import storage_error

            raise storage_error(exc, where=where, doing="") from None
        return cls.sqlite_file(_main_file(rows), conn)

    @classmethod
    async def asqlite(cls, conn: Any) -> LeaseTarget:
        """The file an ``aiosqlite`` connection has open (it can only be asked from async code)."""
        async with conn.execute("PRAGMA database_list") as cur:
            return cls.sqlite_file(_main_file(list(await cur.fetchall())), conn)

    @classmethod
    def postgres(cls, conninfo: str) -> LeaseTarget:
        """The PostgreSQL server and database of ``conninfo`` (leases take sessions of their own there)."""
        from remem._url import describe_postgres

        return cls("postgres", conninfo, describe_postgres(conninfo))

    @classmethod
    def psycopg(cls, conn: Any) -> LeaseTarget:
        """The database of a psycopg connection (sync or async) or of a ``psycopg_pool`` pool."""
        if is_loaded_instance(conn, _POOLS):
            return cls.postgres(str(conn.conninfo))
        from psycopg.conninfo import make_conninfo

        info = conn.info  # its dsn leaves the password out
        password = info.password
        return cls.postgres(make_conninfo(info.dsn, password=password) if password else info.dsn)

    @classmethod
    def of_connection(cls, conn: Any) -> LeaseTarget:
        """The target of a connection or pool of any supported driver; anything else is ``conn``'s alone.
        An ``aiosqlite`` connection needs :meth:`asqlite`."""
        if isinstance(conn, sqlite3.Connection):
            return cls.sqlite(conn)
        if is_loaded_instance(conn, (("psycopg", "Connection"), ("psycopg", "AsyncConnection"), *_POOLS)):
            return cls.psycopg(conn)
        return cls.in_process(conn)

    @classmethod
    async def aof_connection(cls, conn: Any) -> LeaseTarget:
        """Async version of :meth:`of_connection`, which also reads an ``aiosqlite`` connection's file."""
        if is_loaded_instance(conn, (("aiosqlite", "Connection"),)):
            return await cls.asqlite(conn)
        return cls.of_connection(conn)
