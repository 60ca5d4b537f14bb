"""A paid call's ledger row is never lost, and an async run records in its saver's own database.

The ledger write fails for real: a trigger in the database refuses the row (SQLite and PostgreSQL) while
a flag is set. The reply is kept, so nothing is called again; the row rides in the thread's state with the
reply (the same checkpoint) and is written by the thread's next model call, by another agent on the same
database too (a new process would do the same). Both the agent and the ``create_agent`` middleware path.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from remem import (
    BudgetExceededError,
    ScriptedChatModel,
    StorageError,
    acheckpointer_from_url,
    build_agent,
    checkpointer_from_url,
    run_turn,
)
from remem.middleware import BudgetMiddleware
from remem.usage import Budgets, Price, PriceTable, open_ledger
from remem.usage._pending import UNRECORDED

CONFIG: Any = {"configurable": {"thread_id": "t1", "user_id": "maya"}}
FAILURE = "the ledger refuses this row (injected)"


@contextmanager
def ledger_refuses_rows(db_url: str) -> Iterator[Callable[[], None]]:
    """While inside, the database itself refuses every new ledger row (a trigger that raises), until the
    function it yields is called (the ledger recovers)."""
    with open_ledger(db_url):  # the ledger's tables exist before the trigger is put on them
        pass
    sqlite = db_url.startswith("sqlite:///")
    if sqlite:
        conn: Any = sqlite3.connect(
            db_url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
        )
        conn.execute(
            "CREATE TRIGGER refuse_usage BEFORE INSERT ON remem_usage "
            f"BEGIN SELECT RAISE(ABORT, '{FAILURE}'); END"
        )
    else:
        conn = psycopg.connect(db_url, autocommit=True)
        conn.execute(
            "CREATE FUNCTION refuse_usage() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{FAILURE}'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_usage BEFORE INSERT ON remem_usage "
            "FOR EACH ROW EXECUTE FUNCTION refuse_usage()"
        )

    def recover() -> None:
        conn.execute("DROP TRIGGER IF EXISTS refuse_usage" + ("" if sqlite else " ON remem_usage"))

    try:
        yield recover
    finally:
        recover()
        conn.close()


def _rows(db_url: str) -> list[Any]:
    with open_ledger(db_url) as ledger:
        return ledger.events(thread_id="t1")


def test_agent_a_refused_row_is_kept_with_the_reply_and_written_by_the_next_call(db_url: str) -> None:
    model = ScriptedChatModel(replies=["first", "second", "third"])
    with checkpointer_from_url(db_url) as saver:
        agent = build_agent(
            model, strategy="filter", checkpointer=saver, budgets=Budgets(thread_tokens=10**9)
        )
        run_turn(agent, "t1", "one", user_id="maya")
        with ledger_refuses_rows(db_url):
            assert run_turn(agent, "t1", "two", user_id="maya").text == "second"  # the reply is kept
        assert len(model.calls) == 2  # nothing was called again
        assert len(_rows(db_url)) == 1
        kept = agent.get_state(CONFIG).values[UNRECORDED]
        assert [row["turn"] for row in kept] == [2]  # stored in the checkpoint, with the reply

        # Another agent on the same database (as a new process would be) writes it before its own call.
        again = build_agent(
            model, strategy="filter", checkpointer=saver, budgets=Budgets(thread_tokens=10**9)
        )
        run_turn(again, "t1", "three", user_id="maya")
    rows = _rows(db_url)
    assert sorted(r.turn for r in rows) == [1, 2, 3]  # exactly one row per call
    assert len({r.call_id for r in rows}) == 3
    assert len(model.calls) == 3


def test_agent_the_kept_row_counts_against_the_budget_of_the_next_call(db_url: str) -> None:
    model = ScriptedChatModel(default="ok")
    with checkpointer_from_url(db_url) as saver:
        agent = build_agent(model, strategy="filter", checkpointer=saver)
        with ledger_refuses_rows(db_url):
            run_turn(agent, "t1", "one", user_id="maya")
        kept = agent.get_state(CONFIG).values[UNRECORDED]
        spent = sum(r["input_tokens"] + r["output_tokens"] for r in kept)
        assert spent > 0
        strict = build_agent(
            model, strategy="filter", checkpointer=saver, budgets=Budgets(thread_tokens=spent)
        )
        with pytest.raises(BudgetExceededError, match="session_token_budget"):
            run_turn(strict, "t1", "two", user_id="maya")
    assert len(model.calls) == 1
    assert len(_rows(db_url)) == 1  # the check wrote the kept row first, so it counted it


def _middleware_agent(model: ScriptedChatModel, saver: Any, ledger: Any, tools: list[Any]) -> Any:
    budget = BudgetMiddleware(
        ledger, budgets=Budgets(turn_tokens=10**9), prices=PriceTable({"scripted": Price(1, 2)})
    )
    return create_agent(model=model, tools=tools, middleware=[budget], checkpointer=saver)


def _weather(recover: Callable[[], None] | None, seen: list[str]) -> Any:
    @tool
    def lookup(city: str) -> str:
        """Look up the weather of a city."""
        seen.append(city)
        if recover is not None:
            recover()
        return f"sunny in {city}"

    return lookup


CALL = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"city": "Lyon"}, "id": "c1"}])


def test_middleware_a_row_refused_once_does_not_fail_the_call_and_is_written_by_the_next(db_url: str) -> None:
    seen: list[str] = []
    model = ScriptedChatModel(replies=[CALL, "It is sunny in Lyon."])
    with checkpointer_from_url(db_url) as saver, open_ledger(db_url) as ledger:
        with ledger_refuses_rows(db_url) as recover:
            # Before, the refused write failed the model step: its reply was lost and a resume paid again.
            agent = _middleware_agent(model, saver, ledger, [_weather(recover, seen)])
            result = agent.invoke({"messages": [HumanMessage(content="Weather in Lyon?")]}, CONFIG)
        assert result["messages"][-1].text == "It is sunny in Lyon."
        assert not agent.get_state(CONFIG).next  # the run finished: nothing to resume
        assert agent.get_state(CONFIG).values[UNRECORDED] == []  # the second call wrote the first's row
    rows = _rows(db_url)
    assert len(rows) == 2 and len({r.call_id for r in rows}) == 2  # one row per paid call
    assert len(model.calls) == 2 and seen == ["Lyon"]


def test_middleware_a_resumed_run_writes_the_kept_row_and_repeats_no_call(db_url: str) -> None:
    seen: list[str] = []
    model = ScriptedChatModel(replies=[CALL, "It is sunny in Lyon.", "Bye."])
    with checkpointer_from_url(db_url) as saver:
        with open_ledger(db_url) as ledger:
            agent = _middleware_agent(model, saver, ledger, [_weather(None, seen)])
            # The first call is paid and its row refused: kept with its reply. The second call cannot
            # write that row before its check, so it is not sent: the run stops there, nothing lost.
            with ledger_refuses_rows(db_url), pytest.raises(StorageError):
                agent.invoke({"messages": [HumanMessage(content="Weather in Lyon?")]}, CONFIG)
            assert len(model.calls) == 1 and seen == ["Lyon"]
            assert agent.get_state(CONFIG).next
            assert len(agent.get_state(CONFIG).values[UNRECORDED]) == 1
            assert _rows(db_url) == []

        with open_ledger(db_url) as fresh:  # a new ledger and agent, as another process would have
            again = _middleware_agent(model, saver, fresh, [_weather(None, seen)])
            result = again.invoke(None, CONFIG)
            assert result["messages"][-1].text == "It is sunny in Lyon."
            assert again.get_state(CONFIG).values[UNRECORDED] == []
    rows = _rows(db_url)
    assert len(rows) == 2 and len({r.call_id for r in rows}) == 2  # the first call's row exactly once
    assert len(model.calls) == 2 and seen == ["Lyon"]  # neither the first call nor its tool again


def test_plain_ainvoke_on_an_async_saver_records_in_its_database(db_url: str) -> None:
    model = ScriptedChatModel(default="noted")

    async def main() -> None:
        async with acheckpointer_from_url(db_url) as saver:
            agent = build_agent(model, strategy="filter", checkpointer=saver)
            await agent.ainvoke({"messages": [HumanMessage(content="hello")]}, CONFIG)
            await agent.ainvoke({"messages": [HumanMessage(content="again")]}, CONFIG)

    asyncio.run(main())
    assert [(r.turn, r.user_id) for r in _rows(db_url)] == [(1, "maya"), (2, "maya")]
