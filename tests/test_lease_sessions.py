"""No lease session outlives the caller's connection (LangGraph's saver fixtures drop the database next).

A saver built on the caller's own connection or pool takes each thread lease on a session of its own;
that session used to be kept idle for the next lease, process-wide, until a ``from_conn_string`` exit
closed it, so a caller that closed everything could not ``DROP DATABASE`` ("being accessed by other
users"). Now only what remem opens itself keeps lease sessions between leases.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from psycopg_pool import AsyncConnectionPool

from remem import arun_turn, run_turn
from remem.checkpoint import AsyncPostgresSaver, PostgresSaver
from tests.lease_workers import THREAD, agent_for

pytestmark = pytest.mark.postgres
CONFIG = {"configurable": {"thread_id": THREAD}}


def _lease_sessions(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'remem-lease' AND datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _lease_sessions_left(url: str) -> int:
    """The lease sessions still there once the closed ones are gone: a backend leaves pg_stat_activity a
    moment after its client closed the connection (a loaded machine made that moment visible)."""
    deadline = time.monotonic() + 10
    while (count := _lease_sessions(url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_a_saver_on_the_callers_connection_leaves_no_lease_session(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        agent = agent_for(saver)
        run_turn(agent, THREAD, "a turn under its lease")
        agent.invoke({"messages": [HumanMessage("a bare run: a lease per checkpoint")]}, CONFIG)
        assert len(agent.get_state(CONFIG).values["messages"]) == 4
    assert _lease_sessions_left(pg_url) == 0


async def test_an_async_saver_on_the_callers_pool_leaves_no_lease_session(pg_url: str) -> None:
    async with AsyncConnectionPool(pg_url, kwargs={"autocommit": True}, open=False) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        agent = agent_for(saver)
        await arun_turn(agent, THREAD, "a turn under its lease")
        await agent.ainvoke({"messages": [HumanMessage("a bare run")]}, CONFIG)
    assert _lease_sessions_left(pg_url) == 0


def test_a_saver_that_remem_opened_keeps_lease_sessions_until_it_is_closed(pg_url: str) -> None:
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        run_turn(agent_for(saver), THREAD, "hello")
        assert _lease_sessions(pg_url) == 1  # kept for the next turn
    assert _lease_sessions_left(pg_url) == 0


def test_an_erasure_fence_holds_many_threads_on_one_session(pg_url: str) -> None:
    """An erasure holds the lease of every thread it erases: one session for all of them, not one each
    (a user with a hundred threads would take a hundred connections)."""
    from remem import ThreadBusyError
    from remem._lease import thread_lease, thread_leases

    threads = [f"t{i}" for i in range(60)]
    with PostgresSaver.from_conn_string(pg_url) as saver:
        with thread_leases(saver.lease_target, threads, scope="checkpoint", timeout=5):
            assert _lease_sessions(pg_url) == 1
            done: list[Any] = []

            def other() -> None:  # another thread of this process, as another process would
                try:
                    with thread_lease(saver.lease_target, "t42", scope="checkpoint", timeout=0.2):
                        done.append("taken")
                except ThreadBusyError:
                    done.append("busy")

            worker = threading.Thread(target=other)
            worker.start()
            worker.join(30)
            assert done == ["busy"]
        with thread_lease(saver.lease_target, "t42", scope="checkpoint", timeout=1):
            pass  # given back
    assert _lease_sessions_left(pg_url) == 0
