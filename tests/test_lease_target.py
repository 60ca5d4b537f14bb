"""Where a thread's lease (and the usage ledger beside it) lives is found from the connection a saver holds,
by class, with nothing remembered per owner: an async SQLite saver, remem's or LangGraph's, has its lease
and its ledger in its own file, found from async code (an aiosqlite connection cannot be asked from sync)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from remem import arun_turn
from remem._lease import LeaseTarget
from remem.agent import ledger_of
from remem.checkpoint._targets import acheckpointer_lease_target, checkpointer_lease_target
from tests.lease_workers import agent_for


def _ledger_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM remem_usage").fetchone()[0])


@pytest.mark.parametrize("maker", ["remem", "stock"])
async def test_an_async_sqlite_savers_lease_and_ledger_are_in_its_file(maker: str, tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    opener: Any
    if maker == "remem":
        from remem.checkpoint import AsyncSqliteSaver as opener
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver as opener
    async with opener.from_conn_string(str(path)) as saver:
        target = await acheckpointer_lease_target(saver)
        assert (target.kind, target.where) == ("sqlite", str(path.resolve()))
        agent = agent_for(saver)
        await arun_turn(agent, "t", "hello")
        ledger = ledger_of(agent)
        assert ledger is not None
        ledger.close()
    assert _ledger_rows(path) == 1  # the ledger went to the saver's own file, not to this process's memory


def test_a_checkpointer_with_no_database_keeps_its_leases_in_this_process() -> None:
    saver = InMemorySaver()
    assert (
        checkpointer_lease_target(saver) == checkpointer_lease_target(saver) == LeaseTarget.in_process(saver)
    )
    assert checkpointer_lease_target(InMemorySaver()) != checkpointer_lease_target(saver)


@pytest.mark.postgres
def test_a_tenants_view_of_a_store_holds_its_leases_where_the_shared_store_does(pg_url: str) -> None:
    """Each worker of remem serve runs a tenant's requests on its own view of the shared store: a lease kept
    in the process would let two workers append to one thread at once (duplicated and lost messages)."""
    from remem.server._tenancy import TenantStore
    from remem.store import PostgresStore
    from remem.store._targets import store_lease_target

    with PostgresStore.from_conn_string(pg_url) as store:
        shared = store_lease_target(store)
        assert shared.kind == "postgres"
        assert store_lease_target(TenantStore(store, "a")) == shared
