"""Where a checkpointer's thread leases are held (:class:`remem._lease.LeaseTarget`), for any checkpointer.

remem's savers know their own (:attr:`RememSaver.lease_target`). LangGraph's SQLite and PostgreSQL savers
are mapped by their class to the database of the connection they were given; any other checkpointer
(``InMemorySaver``, a third party's) keeps its threads' leases in this process.
"""

from __future__ import annotations

from typing import Any

from remem._lease_target import LeaseTarget, is_loaded_instance
from remem.checkpoint._base import RememSaver

__all__ = ["acheckpointer_lease_target", "checkpointer_lease_target"]

_STOCK = (
    ("langgraph.checkpoint.sqlite", "SqliteSaver"),
    ("langgraph.checkpoint.sqlite.aio", "AsyncSqliteSaver"),
    ("langgraph.checkpoint.postgres", "PostgresSaver"),
    ("langgraph.checkpoint.postgres.aio", "AsyncPostgresSaver"),
)
_STOCK_AIOSQLITE = (("langgraph.checkpoint.sqlite.aio", "AsyncSqliteSaver"),)


def checkpointer_lease_target(saver: Any) -> LeaseTarget:
    """The lease target of ``saver`` (an ``aiosqlite`` saver's file needs :func:`acheckpointer_lease_target`:
    from sync code it is this process's)."""
    if isinstance(saver, RememSaver):
        return saver.lease_target
    if is_loaded_instance(saver, _STOCK) and not is_loaded_instance(saver, _STOCK_AIOSQLITE):
        return LeaseTarget.of_connection(saver.conn)
    return LeaseTarget.in_process(saver)


async def acheckpointer_lease_target(saver: Any) -> LeaseTarget:
    """Async version of :func:`checkpointer_lease_target`, which also reads an ``aiosqlite`` saver's file."""
    if isinstance(saver, RememSaver):
        return await saver.alease_target()
    if is_loaded_instance(saver, _STOCK):
        return await LeaseTarget.aof_connection(saver.conn)
    return LeaseTarget.in_process(saver)
