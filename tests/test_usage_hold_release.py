"""A budget hold the precheck took and no model call took (the turn failed before its call) is released when
the turn ends; in an async turn that release, a write transaction, runs in a worker thread, never on the
event loop (before: ``arun_turn`` released it on the loop, blocking every other task for the write)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from remem import Settings, arun_turn, build_agent, run_turn
from remem.agent import TURN_RULES_ATTRIBUTE
from remem.models import ScriptedChatModel
from remem.usage import Budgets
from remem.usage._holds import HOLDS_TABLE
from remem.usage.sqlite import SqliteLedger

USER = "maya"


def _agent(ledger: SqliteLedger) -> Any:
    return build_agent(
        ScriptedChatModel(default="OK."),
        strategy="filter",
        summarizer="extractive",
        checkpointer=InMemorySaver(),
        settings=Settings(),
        ledger=ledger,
        budgets=Budgets(thread_tokens=10**7, user_day_tokens=10**8),
    )


def _holds(ledger: SqliteLedger) -> int:
    return int(ledger._read(f"SELECT count(DISTINCT hold) FROM {HOLDS_TABLE}", ())[0][0])


def _failing_before_the_call(gate: Any, seen: list[int]) -> Any:
    before = gate.before

    def fails(*args: Any, **kwargs: Any) -> Any:
        seen.append(_holds(gate.ledger))  # the precheck's hold, taken before the input was stored
        raise RuntimeError("the model node failed before its call")

    return before, fails


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hold_no_call_took_is_released_off_the_event_loop(tmp_path: Path, mode: str) -> None:
    with SqliteLedger.from_path(tmp_path / "usage.db") as ledger:
        agent = _agent(ledger)
        gate = getattr(agent, TURN_RULES_ATTRIBUTE).precheck.__self__.gate
        run_turn(agent, "t", "hello", user_id=USER)
        seen: list[int] = []
        before, fails = _failing_before_the_call(gate, seen)
        released_on: list[tuple[int, bool]] = []  # (thread, whether an event loop runs in it)
        release = ledger.release

        def watched(hold_id: str) -> None:
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            released_on.append((threading.get_ident(), on_loop))
            release(hold_id)

        ledger.release = watched  # type: ignore[method-assign]
        gate.before = fails
        if mode == "sync":
            with pytest.raises(RuntimeError):
                run_turn(agent, "t", "a turn that fails", user_id=USER)
        else:

            async def main() -> int:
                with pytest.raises(RuntimeError):
                    await arun_turn(agent, "t", "a turn that fails", user_id=USER)
                return threading.get_ident()

            loop_thread = asyncio.run(main())
            assert released_on and released_on[0][0] != loop_thread
        assert seen == [1] and _holds(ledger) == 0 and gate._checked == {}
        assert [on_loop for _, on_loop in released_on] == [False]  # one release, on no event loop
        gate.before = before
        ledger.release = release  # type: ignore[method-assign]
        run_turn(agent, "t", "and on", user_id=USER)  # the failed turn is finished first, then this one
        assert _holds(ledger) == 0 and ledger.spent(thread_id="t").calls == 3


def test_a_budgeted_model_call_on_sqlite_is_two_write_transactions(tmp_path: Path) -> None:
    # What the ledger costs a model call on SQLite, counted in statements (as tests/test_usage_round_trips.py
    # counts PostgreSQL's round trips): the hold, taken by the precheck (BEGIN IMMEDIATE, the expired holds'
    # removal, the read, the insert, COMMIT), and the settle (BEGIN IMMEDIATE, the row, whose trigger adds
    # it to its running totals, the hold's removal, COMMIT); no other statement of the ledger's.
    with SqliteLedger.from_path(tmp_path / "usage.db") as ledger:
        agent = _agent(ledger)
        run_turn(agent, "t", "hello", user_id=USER)
        sent: list[str] = []
        ledger.conn.set_trace_callback(sent.append)
        try:
            run_turn(agent, "t", "hello again", user_id=USER)
        finally:
            ledger.conn.set_trace_callback(None)
        words = [" ".join(statement.split()[:3]) for statement in sent]
        # sqlite3 reports a statement again for each trigger program it runs: one line per statement here
        steps = [w for i, w in enumerate(words) if i == 0 or w != words[i - 1]]
        assert steps == [
            "BEGIN IMMEDIATE",
            f"DELETE FROM {HOLDS_TABLE}",
            "SELECT scope, calls,",
            f"INSERT INTO {HOLDS_TABLE}",
            "COMMIT",
            "BEGIN IMMEDIATE",
            "INSERT INTO remem_usage",
            f"DELETE FROM {HOLDS_TABLE}",
            "COMMIT",
        ], sent
        assert ledger.spent(thread_id="t").calls == 2 and _holds(ledger) == 0
