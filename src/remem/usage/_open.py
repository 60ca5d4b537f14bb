"""Opening a ledger: on a URL, in a checkpointer's (or store's) own database, read-only."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from remem._lease_target import LeaseTarget, is_loaded_instance
from remem._url import parse_database_url
from remem.usage._base import LazyLedger, Ledger
from remem.usage.meter import Meter
from remem.usage.prices import PriceTable

__all__ = ["ledger_for", "ledger_from_url", "open_ledger", "read_ledger", "read_ledger_of", "usage_meter"]


def ledger_from_url(url: str | Path) -> Ledger:
    """A ledger on ``memory://`` (this process only), ``sqlite:///PATH`` or ``postgresql://...``, set up;
    the caller closes it (or use :func:`open_ledger`)."""
    parsed = parse_database_url(url)
    if parsed.kind == "postgres":
        from remem.usage.postgres import PostgresLedger

        return PostgresLedger.open(parsed.target)
    from remem.usage.sqlite import SqliteLedger

    return SqliteLedger.open(":memory:" if parsed.kind == "memory" else parsed.target)


# The savers and stores whose own connection a ledger may share (by class: nothing is found by attributes).
_SQLITE_SAVERS = (("remem.checkpoint.sqlite", "SqliteSaver"), ("langgraph.checkpoint.sqlite", "SqliteSaver"))
_POOLED = (
    ("remem.checkpoint.postgres", "PostgresSaver"),
    ("langgraph.checkpoint.postgres", "PostgresSaver"),
    ("remem.store.postgres", "PostgresStore"),
    ("langgraph.store.postgres", "PostgresStore"),
)
_POOL = (("psycopg_pool", "ConnectionPool"),)


def _sharing(owner: Any) -> Ledger | None:
    """A ledger on ``owner``'s own connection, when it can be shared safely: the ``sqlite3`` connection of
    a SQLite saver (remem's or the stock one) in autocommit mode, with the saver's lock (then the ledger
    lives as long as the owner); or, beside the ``psycopg_pool`` pool of a PostgreSQL saver or store, one
    connection of its own with the pool's settings, kept for the ledger's life (a borrow per call costs
    the pool's connection check, a round trip)."""
    if is_loaded_instance(owner, _SQLITE_SAVERS):
        conn, lock = owner.conn, owner.lock
        if isinstance(conn, sqlite3.Connection) and conn.isolation_level is None:
            from remem.usage.sqlite import SqliteLedger

            return SqliteLedger.sharing(conn, lock)
    if is_loaded_instance(owner, _POOLED) and is_loaded_instance(owner.conn, _POOL):
        from remem.usage.postgres import PostgresLedger

        return PostgresLedger.beside_pool(owner.conn)
    return None


def _target_of(owner: Any) -> LeaseTarget:
    """Where ``owner``'s database is: a checkpointer's, a store's, or a connection's or pool's own."""
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

    if isinstance(owner, BaseCheckpointSaver):
        from remem.checkpoint._targets import checkpointer_lease_target

        return checkpointer_lease_target(owner)
    if isinstance(owner, BaseStore):
        from remem.store._targets import store_lease_target

        return store_lease_target(owner)
    return LeaseTarget.of_connection(owner)


async def _atarget_of(owner: Any) -> LeaseTarget:
    """Async version of :func:`_target_of`, which also reads an ``aiosqlite`` saver's file."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    if isinstance(owner, BaseCheckpointSaver):
        from remem.checkpoint._targets import acheckpointer_lease_target

        return await acheckpointer_lease_target(owner)
    if is_loaded_instance(owner, (("aiosqlite", "Connection"),)):
        return await LeaseTarget.aof_connection(owner)
    return _target_of(owner)


def ledger_for(owner: Any) -> LazyLedger:
    """The ledger in ``owner``'s database (a checkpointer, a store, a connection or a pool), opened on first
    use: the same SQLite file or PostgreSQL database as the threads, on the owner's own connection where
    that is safe (remem's ``SqliteSaver``), else on a connection of its own. An owner with no database of its own
    (``InMemorySaver``, None) gets a ledger in this process's memory. The caller closes it. An ``aiosqlite``
    owner's file is found by :meth:`LazyLedger.aprepare`, awaited before the first use from sync code.
    """
    found: list[LeaseTarget] = []

    async def prepare() -> None:
        if owner is not None and not found:
            found.append(await _atarget_of(owner))

    def opened() -> Ledger:
        shared = _sharing(owner)
        if shared is not None:
            return shared
        target = None if owner is None else found[0] if found else _target_of(owner)
        if target is not None and target.kind == "postgres":
            from remem.usage.postgres import PostgresLedger

            return PostgresLedger.open(target.where)
        from remem.usage.sqlite import SqliteLedger

        return SqliteLedger.open(
            target.where if target is not None and target.kind == "sqlite" else ":memory:"
        )

    return LazyLedger(opened, prepare=prepare)


@contextmanager
def open_ledger(url: str | Path) -> Iterator[Ledger]:
    """:func:`ledger_from_url`, closed on exit."""
    ledger = ledger_from_url(url)
    try:
        yield ledger
    finally:
        ledger.close()


@contextmanager
def read_ledger(url: str | Path) -> Iterator[Ledger | None]:
    """The ledger at ``url`` opened read-only (nothing created); None when the database holds no ledger.

    A missing SQLite file raises :class:`~remem.errors.NotFoundError`.
    """
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        yield None
        return
    if parsed.kind == "postgres":
        from remem.usage.postgres import PostgresLedger

        opened: Ledger | None = PostgresLedger.open_read_only(parsed.target)
    else:
        from remem.usage.sqlite import SqliteLedger

        opened = SqliteLedger.open_read_only(parsed.target)
    try:
        yield opened
    finally:
        if opened is not None:
            opened.close()


@contextmanager
def read_ledger_of(owner: Any) -> Iterator[Ledger | None]:
    """The ledger in ``owner``'s database (see :func:`ledger_for`) opened read-only: nothing is created;
    None when that database holds no ledger or ``owner`` has no database (``InMemorySaver``)."""
    target = _target_of(owner)
    if target.kind == "process":
        yield None
        return
    if target.kind == "postgres":
        from remem.usage.postgres import PostgresLedger

        opened: Ledger | None = PostgresLedger.open_read_only(target.where)
    else:
        from remem.usage.sqlite import SqliteLedger

        opened = SqliteLedger.open_read_only(target.where)
    try:
        yield opened
    finally:
        if opened is not None:
            opened.close()


def usage_meter(url: str | Path, settings: Any) -> Meter:
    """A :class:`Meter` on the ledger at ``url`` (opened on first use; close ``meter.ledger``), with the
    prices and the token counter of ``settings`` (a :class:`~remem.config.Settings`)."""
    from remem.messages import token_counter

    return Meter(
        LazyLedger(lambda: ledger_from_url(url)),
        PriceTable.from_settings_rows(settings.prices),
        count=token_counter(settings.token_counter),
    )
