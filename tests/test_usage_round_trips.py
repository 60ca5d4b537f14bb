"""What the ledger costs a model call on PostgreSQL, counted in the messages its connection sends (issue 22,
point 5): libpq's trace of the ledger's own connection, each ``Query`` (a simple-protocol message), ``Flush``
(a pipeline wanting rows) or lone ``Sync`` (the end of an extended-protocol message) a round trip the call
waits for (tests/pg_trace.py, shared with tests/test_checkpoint_round_trips.py).

Before: the hold was a transaction of eight round trips (BEGIN, one advisory lock per scope, the expired
holds' removal, the read, the insert, COMMIT) and the settle one of five (BEGIN, SET LOCAL, the row, the
hold's removal, COMMIT): 15 per model call with the precheck's read. Then 4: the read, the hold in two (the
locks and the read in one message, the insert and the commit in the next), the settle in one statement.
Now 3: the precheck takes the hold (its read is the hold's), the call takes the precheck's hold.
The guarantees stay those of tests/test_budget_processes.py (which runs the same paths on real processes).
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from psycopg import pq

from remem import Settings, build_agent, run_turn
from remem.models import ScriptedChatModel
from remem.usage import Budgets, open_ledger
from remem.usage._records import UsageEvent
from tests.pg_trace import traced

pytestmark = pytest.mark.postgres

USER = "maya"


def _inner(ledger: Any) -> Any:
    return ledger.inner() if hasattr(ledger, "inner") else ledger


def test_a_hold_is_two_round_trips_and_its_settle_one(pg_url: str) -> None:
    with open_ledger(pg_url) as ledger:
        keys = [("thread", "t", ""), ("turn", "t", "1"), ("user_day", USER, "2026-01-01")]
        inner = _inner(ledger)
        with traced(inner.conn) as hold_trace:
            hold, spent = ledger.hold(keys, tokens=10, cost=0.0, seconds=60, fits=lambda fresh: True)
        assert hold is not None and spent["thread"].calls == 0
        event = UsageEvent(
            kind="chat", model="m", input_tokens=10, output_tokens=5, thread_id="t", user_id=USER, turn=1
        )
        with traced(inner.conn) as settle_trace:
            ledger.settle(event, hold)
        assert hold_trace.round_trips == 2
        assert settle_trace.round_trips == 1
        assert ledger.spent(thread_id="t").calls == 1
        assert int(ledger._read("SELECT count(*) FROM remem_usage_holds", ())[0][0]) == 0
        # a call that does not fit holds nothing, and ends its transaction
        refused, _ = ledger.hold(keys, tokens=10, cost=0.0, seconds=60, fits=lambda fresh: False)
        assert refused is None and inner.conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert int(ledger._read("SELECT count(*) FROM remem_usage_holds", ())[0][0]) == 0


def test_a_budgeted_model_call_waits_on_the_ledger_three_times(pg_url: str) -> None:
    with open_ledger(pg_url) as ledger:
        agent = build_agent(
            ScriptedChatModel(default="OK."),
            strategy="filter",
            summarizer="extractive",
            checkpointer=InMemorySaver(),
            settings=Settings(),
            ledger=ledger,
            budgets=Budgets(turn_tokens=10**6, thread_tokens=10**7, user_day_tokens=10**8),
        )
        run_turn(agent, "t", "hello", user_id=USER)  # the ledger opened, its statements prepared
        with traced(_inner(ledger).conn) as trace:
            run_turn(agent, "t", "hello again", user_id=USER)
        assert ledger.spent(thread_id="t").calls == 2
        # the hold, taken by the precheck (2: its read is the hold's own); the settle (1)
        assert trace.round_trips == 3, trace.lines
        assert trace.writes == 2  # the hold's transaction, and the settle's one statement


def test_a_ledger_on_a_borrowed_pool_connection_pipelines_its_transactions(pg_url: str) -> None:
    # A pool's connection keeps its own settings: each write sets its no-flush commit for its transaction
    # only, pipelined with it (one round trip), and a hold is two, as on the ledger's own connection.
    from psycopg_pool import ConnectionPool

    from remem.usage.postgres import PostgresLedger

    with ConnectionPool(pg_url, kwargs={"autocommit": True}, min_size=1, max_size=1) as pool:
        ledger = PostgresLedger.on_pool(pool)
        with pool.connection() as conn:  # the pool's one connection, traced while the ledger borrows it
            own = conn.execute("SHOW synchronous_commit").fetchone()
            conn.execute("SET synchronous_commit = remote_apply")  # a setting of the pool owner's
        keys = [("thread", "t", ""), ("user_day", USER, "2026-01-01")]
        with traced(conn) as hold_trace:
            hold, _ = ledger.hold(keys, tokens=10, cost=0.0, seconds=60, fits=lambda fresh: True)
        assert hold is not None
        event = UsageEvent(
            kind="chat", model="m", input_tokens=10, output_tokens=5, thread_id="t", user_id=USER
        )
        with traced(conn) as settle_trace:
            ledger.settle(event, hold)
        assert (hold_trace.round_trips, settle_trace.round_trips) == (2, 1)
        assert any("SET LOCAL synchronous_commit" in line for line in settle_trace.lines)
        assert ledger.spent(thread_id="t").calls == 1
        assert int(ledger._read("SELECT count(*) FROM remem_usage_holds", ())[0][0]) == 0
        with conn.cursor() as cur:  # the pool's connection keeps its own commit setting
            assert cur.execute("SHOW synchronous_commit").fetchone() == ("remote_apply",)
            cur.execute(f"SET synchronous_commit = {own[0]}")  # type: ignore[index]

        def fails(fresh: Any) -> bool:
            raise RuntimeError("the budget check failed")

        with pytest.raises(RuntimeError):  # an error between the read and the insert holds nothing
            ledger.hold(keys, tokens=10, cost=0.0, seconds=60, fits=fails)
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert int(ledger._read("SELECT count(*) FROM remem_usage_holds", ())[0][0]) == 0


def test_a_hold_the_precheck_took_is_released_when_no_call_takes_it(pg_url: str) -> None:
    from remem.agent import TURN_RULES_ATTRIBUTE
    from remem.errors import BudgetExceededError

    def holds() -> int:
        return int(ledger._read("SELECT count(DISTINCT hold) FROM remem_usage_holds", ())[0][0])

    with open_ledger(pg_url) as ledger:
        agent = build_agent(
            ScriptedChatModel(default="OK."),
            strategy="filter",
            summarizer="extractive",
            checkpointer=InMemorySaver(),
            settings=Settings(),
            ledger=ledger,
            budgets=Budgets(thread_tokens=10**7, user_day_tokens=10**8),
        )
        gate = getattr(agent, TURN_RULES_ATTRIBUTE).precheck.__self__.gate
        run_turn(agent, "t", "hello", user_id=USER)
        taken: list[int] = []
        before = gate.before

        def fails_before_the_call(*args: Any, **kwargs: Any) -> Any:
            taken.append(holds())  # the precheck's hold, taken before the input was stored
            raise RuntimeError("the model node failed before its call")

        gate.before = fails_before_the_call
        with pytest.raises(RuntimeError):
            run_turn(agent, "t", "a turn that fails", user_id=USER)
        assert taken == [1] and holds() == 0 and gate._checked == {}
        gate.before = before
        # a refused input holds nothing either
        with pytest.raises(BudgetExceededError):
            run_turn(agent, "t", "over the budget", user_id=USER, budgets={"thread_tokens": 1})
        assert holds() == 0 and gate._checked == {}
        # the next turn finishes the failed one first (its input was stored), then its own: each call's
        # hold taken and settled
        run_turn(agent, "t", "and on", user_id=USER)
        assert holds() == 0 and ledger.spent(thread_id="t").calls == 3
