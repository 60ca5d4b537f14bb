"""The lease a turn holds travels in one documented place: its runs' config (``TURN_LEASE_KEY``).

The saver used to find ``run_turn``'s lease through a context variable no signature showed: a run in
another context (a worker thread) did not see it, and waited for the lease its own turn held. Now the
saver writes under the lease the config carries, verifying it before each write.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from remem._lease import TURN_LEASE_KEY, carry_lease, thread_lease
from remem.errors import StorageError
from tests.lease_workers import THREAD, agent_for, open_saver


def test_the_saver_writes_under_the_lease_its_config_carries(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    with open_saver("sqlite", str(path)) as saver:
        agent = agent_for(saver)
        with thread_lease(saver.lease_target, THREAD, scope="checkpoint", timeout=1) as lease:
            config = carry_lease({"configurable": {"thread_id": THREAD}}, lease)
            assert config["configurable"][TURN_LEASE_KEY] is lease
            done: list[Any] = []
            # A new thread starts with an empty context: only the config says which lease it runs under.
            worker = threading.Thread(
                target=lambda: done.append(agent.invoke({"messages": [HumanMessage("hi")]}, config))
            )
            worker.start()
            worker.join(60)
            assert done and done[0]["messages"][-1].text == "reply to hi"
            os.unlink(f"{path}-lease")  # the lease now guards nothing: the next write must not be made
            with pytest.raises(StorageError, match="was lost"):
                agent.invoke({"messages": [HumanMessage("again")]}, config)
        texts = [m.text for m in agent.get_state({"configurable": {"thread_id": THREAD}}).values["messages"]]
        assert texts == ["hi", "reply to hi"]
