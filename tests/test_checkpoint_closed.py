"""A saver used after its ``with`` block ended says so, and how to keep it open, on both backends."""

from __future__ import annotations

import pytest

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
from remem.agent import thread_config
from remem.errors import StorageError


def test_an_agent_used_after_the_saver_closed_says_to_use_with(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        agent = build_agent(ScriptedChatModel(default="ok"), strategy="filter", checkpointer=saver)
        run_turn(agent, "t", "hello")
    with pytest.raises(StorageError, match=r"is closed: the `with` block .* inside the block"):
        run_turn(agent, "t", "again")
    with pytest.raises(StorageError, match="is closed"):
        agent.get_state(thread_config("t"))
