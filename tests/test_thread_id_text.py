"""A thread id that is not Unicode text (a lone surrogate) is refused with a usage error, on every path that
takes a thread's lease (the savers under a graph, ``run_turn``), before anything is written; the memory
client already refused it, with the same words (one check: ``remem.layout.check_label``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import START, MessagesState, StateGraph

from remem.agent import arun_turn, build_agent, run_turn
from remem.checkpoint import AsyncPostgresSaver, AsyncSqliteSaver, PostgresSaver, SqliteSaver
from remem.errors import RememUsageError
from remem.testing import ScriptedChatModel

BAD = "t\ud800"
SAID = "lone surrogate, which is not Unicode text"


def _graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda state: {"messages": [("ai", "hi")]})
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _check_sync(saver: Any) -> None:
    with pytest.raises(RememUsageError, match=SAID):
        _graph(saver).invoke({"messages": [("user", "hello")]}, _config(BAD))
    with pytest.raises(RememUsageError, match=SAID):
        run_turn(build_agent(ScriptedChatModel(default="hi"), checkpointer=saver), BAD, "hello")
    assert list(saver.list(None)) == []  # nothing was written
    _graph(saver).invoke({"messages": [("user", "hello")]}, _config("t\u00e9"))  # real text still works
    assert len(list(saver.list(None))) > 0


async def _check_async(saver: Any) -> None:
    with pytest.raises(RememUsageError, match=SAID):
        await _graph(saver).ainvoke({"messages": [("user", "hello")]}, _config(BAD))
    with pytest.raises(RememUsageError, match=SAID):
        await arun_turn(build_agent(ScriptedChatModel(default="hi"), checkpointer=saver), BAD, "hello")
    assert [c async for c in saver.alist(None)] == []


def test_sqlite_savers_refuse_a_lone_surrogate(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        _check_sync(saver)


async def test_async_sqlite_saver_refuses_a_lone_surrogate(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        await _check_async(saver)


@pytest.mark.postgres
def test_postgres_saver_refuses_a_lone_surrogate(pg_url: str) -> None:
    with PostgresSaver.from_conn_string(pg_url) as saver:
        _check_sync(saver)


@pytest.mark.postgres
async def test_async_postgres_saver_refuses_a_lone_surrogate(pg_url: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url) as saver:
        await _check_async(saver)
