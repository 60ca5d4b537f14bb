"""A turn whose checkpoint write fails on a full disk (SQLite ``SQLITE_FULL``, made real by capping the file's
growth with ``PRAGMA max_page_count`` on the saver's connection) says whether the user's input was kept in
the thread and what finishes the turn; sending the same message again then finishes it once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from remem.agent import arun_turn, build_agent, run_turn
from remem.checkpoint import AsyncSqliteSaver, SqliteSaver
from remem.errors import StorageError
from remem.testing import ScriptedChatModel


def _cap(saver: Any) -> None:
    pages = saver.conn.execute("PRAGMA page_count").fetchone()[0]
    saver.conn.execute(f"PRAGMA max_page_count = {pages}")


def _uncap(saver: Any) -> None:
    saver.conn.execute("PRAGMA max_page_count = 1073741823")


def _text(n: int) -> str:
    rng = random.Random(7)  # incompressible enough to need new pages
    return "".join(rng.choice("abcdefghij klmnop") for _ in range(n))


def _messages(agent: Any) -> list[tuple[str, Any]]:
    state = agent.get_state({"configurable": {"thread_id": "k1"}})
    return [(m.type, m.content) for m in state.values["messages"]]


def test_a_full_disk_after_the_model_call_says_the_message_was_kept(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:

        def reply_on_a_full_disk(_messages: Any) -> str:
            _cap(saver)  # the input is stored; the reply's write will not fit
            return _text(50_000)

        model = ScriptedChatModel(replies=["hi", reply_on_a_full_disk, "the answer"])
        agent = build_agent(model, checkpointer=saver)
        run_turn(agent, "k1", "hello")
        with pytest.raises(StorageError, match="disk is full") as caught:
            run_turn(agent, "k1", "second question")
        assert "your message was kept in the thread: send the same message again" in str(caught.value)
        assert _messages(agent)[-1] == ("human", "second question")
        _uncap(saver)
        assert run_turn(agent, "k1", "second question").content == "the answer"
        assert _messages(agent) == [
            ("human", "hello"),
            ("ai", "hi"),
            ("human", "second question"),
            ("ai", "the answer"),
        ]


def test_a_full_disk_before_the_input_is_stored_says_it_was_not(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        agent = build_agent(ScriptedChatModel(replies=["hi"]), checkpointer=saver)
        run_turn(agent, "k1", "hello")
        _cap(saver)
        with pytest.raises(StorageError, match="disk is full") as caught:
            run_turn(agent, "k1", _text(50_000))
        assert "your message was not stored: send it again" in str(caught.value)
        assert _messages(agent) == [("human", "hello"), ("ai", "hi")]


async def test_async_turn_on_a_full_disk_says_the_message_was_not_stored(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        agent = build_agent(ScriptedChatModel(replies=["hi"]), checkpointer=saver)
        await arun_turn(agent, "k1", "hello")
        async with saver.conn.execute("PRAGMA page_count") as cur:
            pages = (await cur.fetchone())[0]
        await saver.conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StorageError, match="disk is full") as caught:
            await arun_turn(agent, "k1", _text(50_000))
        assert "your message was not stored: send it again" in str(caught.value)
