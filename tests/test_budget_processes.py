"""Budgets that hold across processes: one user's processes, each on its own thread, share a user-day budget.

Real processes on a real SQLite file and the machine's PostgreSQL. Before holds, six processes under a
3,000-token budget spent 3,337 (SQLite) and 3,290 (PostgreSQL) together: each read the same total and
passed. Now each call holds its expected spending while it runs, checked in the hold's transaction, so
together they pass the budget by no more than one process alone can (its last call's output, which no
check before the call can know); and a hold whose process was SIGKILLed expires instead of blocking.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from remem.errors import BudgetExceededError, ModelError
from remem.middleware import BudgetMiddleware
from remem.models import ScriptedChatModel
from remem.usage import Budgets, Ledger, open_ledger
from remem.usage._holds import HOLDS_TABLE
from tests.budget_workers import USER, context, hanging_worker, spend_worker

WORKERS = 6
BUDGET = 3000


@pytest.fixture
def url(db_url: str) -> str:
    return db_url


def _holds(ledger: Ledger) -> int:
    return int(ledger._read(f"SELECT count(*) FROM {HOLDS_TABLE}", ())[0][0])


def test_six_processes_of_one_user_spend_no_more_than_the_user_day_budget(url: str, tmp_path: Path) -> None:
    with open_ledger(url):  # the schema, set up once before the children race
        pass
    ctx = context()
    start = ctx.Event()
    logs = [tmp_path / f"worker{i}.log" for i in range(WORKERS)]
    children = [
        ctx.Process(target=spend_worker, args=(url, f"thread-{i}", BUDGET, start, str(logs[i])))
        for i in range(WORKERS)
    ]
    for child in children:
        child.start()
    start.set()
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    with open_ledger(url) as ledger:
        spent = ledger.user_day(USER)
        events = ledger.events(user_id=USER)
        assert _holds(ledger) == 0  # every hold settled
    assert all(log.read_text().endswith("refused\n") for log in logs)  # each ran until the budget said no
    assert spent.calls == len(events) == sum(log.read_text().count("sent") for log in logs)
    # A check before a call counts its input: its output is the one thing it cannot know. One process
    # alone passes the budget by at most its last call's output; six together may not pass it by more.
    largest_output = max(e.output_tokens for e in events)
    assert spent.tokens <= BUDGET + largest_output, (spent.tokens, largest_output)


QUESTION = {"messages": [HumanMessage(content="a long question " * 20)]}  # as the hanging worker's
ALIVE: Any = {"configurable": {"thread_id": "alive", "user_id": USER}}


def _agent_beside(ledger: Ledger, budget: int, seconds: float) -> Any:
    """An agent of the same user as the hanging worker, under the same budget."""
    middleware = BudgetMiddleware(ledger, budgets=Budgets(user_day_tokens=budget), hold_seconds=seconds)
    return create_agent(
        model=ScriptedChatModel(default="OK."),
        tools=[],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )


def _hanging(url: str, tmp_path: Path, budget: int, seconds: float) -> Any:
    """A process whose one call hangs in its model, holding the budget; returned once the call is sent."""
    ready = tmp_path / "ready.json"
    child = context().Process(
        target=hanging_worker, args=(url, "hanging", budget, str(ready)), kwargs={"hold_seconds": seconds}
    )
    child.start()
    deadline = time.monotonic() + 60
    while not ready.exists() and child.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), "the hanging call never reached its model"
    return child


def test_a_call_longer_than_its_hold_keeps_holding_while_it_runs(url: str, tmp_path: Path) -> None:
    """Before, a call that ran longer than ``hold_seconds`` was under-counted by other processes once its
    hold expired: the second call here was sent. Its process now renews the hold while the call runs."""
    budget, seconds = 150, 2.0
    child = _hanging(url, tmp_path, budget, seconds)
    try:
        time.sleep(3 * seconds)  # the call runs on, three hold lifetimes
        assert child.is_alive()
        with open_ledger(url) as ledger:
            with pytest.raises(BudgetExceededError, match="held by calls still running"):
                _agent_beside(ledger, budget, seconds).invoke(QUESTION, ALIVE)
            assert ledger.user_day(USER).calls == 0
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)


def test_a_hold_of_a_killed_process_blocks_until_it_expires_then_frees_the_budget(
    url: str, tmp_path: Path
) -> None:
    # The hold lives ``seconds`` past its last renewal (every quarter of it), and the kill comes as soon
    # as the call holds it. The first try then comes within a second or two even on a loaded machine:
    # the ledger and the agent are made before the kill (made after it, under load, they took longer
    # than a short hold, hence 10 s here before).
    budget, seconds = 150, 6.0
    with open_ledger(url) as ledger:
        agent = _agent_beside(ledger, budget, seconds)
        child = _hanging(url, tmp_path, budget, seconds)
        deadline = time.monotonic() + 60
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)

        assert _holds(ledger) == 1  # the dead process's hold is still there
        refusals: list[str] = []
        while True:  # refused while the hold lives, sent once it expired: never blocked for good
            try:
                agent.invoke(QUESTION, ALIVE)
                break
            except BudgetExceededError as exc:
                refusals.append(str(exc))
                assert time.monotonic() < deadline, "the dead process's hold never expired"
                time.sleep(0.25)
        assert refusals and "held by calls still running" in refusals[0]
        assert ledger.user_day(USER).calls == 1  # the one call that was sent; the killed one never paid
        assert _holds(ledger) == 0  # the expired hold is gone, the sent call's settled


def test_a_failed_model_call_releases_its_hold(url: str) -> None:
    with open_ledger(url) as ledger:
        middleware = BudgetMiddleware(ledger, budgets=Budgets(user_day_tokens=150))
        model = ScriptedChatModel(replies=[RuntimeError("provider down")], default="OK.")
        agent = create_agent(model=model, tools=[], middleware=[middleware], checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t", "user_id": USER}}
        question = {"messages": [HumanMessage(content="a long question " * 20)]}
        with pytest.raises(RuntimeError, match="provider down"):
            agent.invoke(question, config)
        assert _holds(ledger) == 0  # not paid: nothing is held
        agent.invoke(
            {"messages": [HumanMessage(content="a long question " * 20)]},
            {"configurable": {"thread_id": "u", "user_id": USER}},
        )
        assert ledger.user_day(USER).calls == 1


def test_the_agents_failed_call_releases_its_hold_too(url: str) -> None:
    from remem import Settings, build_agent, run_turn

    with open_ledger(url) as ledger:
        agent = build_agent(
            ScriptedChatModel(replies=[RuntimeError("provider down")], default="OK."),
            strategy="filter",
            summarizer="extractive",
            checkpointer=InMemorySaver(),
            settings=Settings(),
            ledger=ledger,
            budgets=Budgets(user_day_tokens=1000),
        )
        with pytest.raises(ModelError):
            run_turn(agent, "t", "hello", user_id=USER)
        assert _holds(ledger) == 0
        run_turn(agent, "t", "hello", user_id=USER)
        assert _holds(ledger) == 0 and ledger.user_day(USER).calls == 1


def test_a_version_3_ledger_gains_its_holds_and_keeps_its_rows(url: str) -> None:
    from remem import _migrate
    from remem.usage import UsageEvent

    with open_ledger(url) as ledger:
        ledger.record(UsageEvent("chat", "m", 100, 10, thread_id="t", user_id=USER, turn=1, call_id="c1"))
        ledger._write(f"DROP TABLE {HOLDS_TABLE}", ())  # as this remem's previous version left it
        ledger._write(f"DELETE FROM {_migrate.TABLE} WHERE component = 'usage' AND version = 4", ())
    with open_ledger(url) as ledger:  # migration 4 runs
        assert ledger.user_day(USER).tokens == 110
        hold, spent = ledger.hold(
            [("user_day", USER, ledger.events()[0].day)], tokens=50, cost=0.0, seconds=60, fits=lambda _: True
        )
        assert hold is not None and spent["user_day"].tokens == 110
        assert ledger.spent_in(["user_day"], user_id=USER)["user_day"].held_tokens == 50
        assert _holds(ledger) == 1
