"""What the ledger costs a model call on PostgreSQL, counted in the messages its connection sends (issue 22,
point 5): libpq's trace of the ledger's own connection, each ``Query`` (a simple-protocol message) or
``Sync`` (the end of an extended-protocol one) a round trip the call waits for.

Before: the hold was a transaction of eight round trips (BEGIN, one advisory lock per scope, the expired
holds' removal, the read, the insert, COMMIT) and the settle one of five (BEGIN, SET LOCAL, the row, the
hold's removal, COMMIT): 15 per model call with the precheck's read. Now 4: the read, the hold in two (the
locks and the read in one message, the insert and the commit in the next), the settle in one statement.
The guarantees stay those of tests/test_budget_processes.py (which runs the same paths on real processes).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from psycopg import pq

from remem import Settings, build_agent, run_turn
from remem.models import ScriptedChatModel
from remem.usage import Budgets, open_ledger
from remem.usage._records import UsageEvent

pytestmark = pytest.mark.postgres

USER = "maya"


class Trace:
    def __init__(self) -> None:
        self.lines: list[str] = []

    @property
    def round_trips(self) -> int:
        return sum(
            1 for line in self.lines if line.startswith("F\t") and line.split("\t")[2] in ("Query", "Sync")
        )

    @property
    def writes(self) -> int:
        """Transactions that wrote: each ends with a COMMIT, or is one write statement in autocommit."""
        sent = [line for line in self.lines if line.startswith("F\t")]
        commits = sum(line.count("COMMIT") for line in sent)
        lone = sum(
            1 for line in sent if line.split("\t")[2] == "Parse" and ("INSERT" in line or "DELETE" in line)
        )
        return commits + lone


@contextmanager
def traced(conn: Any) -> Iterator[Trace]:
    trace = Trace()
    with tempfile.TemporaryFile("w+") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield trace
        finally:
            conn.pgconn.untrace()
            out.seek(0)
            trace.lines = out.read().splitlines()


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


def test_a_budgeted_model_call_waits_on_the_ledger_four_times(pg_url: str) -> None:
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
        # the precheck's read; the hold (2); the settle (1)
        assert trace.round_trips == 4, trace.lines
        assert trace.writes == 2  # the hold's transaction, and the settle's one statement
