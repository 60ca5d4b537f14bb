"""A running ``ContextCardNode`` goes on after another process forgot its thread.

It kept the thread it had opened and appended to it at every call: once ``remem forget`` (another process)
had erased the thread, every later call failed with "thread ... does not exist". Now it opens the thread
anew for what is said from then on; what was forgotten stays forgotten.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from remem import Memory, Settings
from remem.middleware import ContextCardNode
from tests import matrix
from tests.lease_workers import context, erase_worker


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_context_card_node_goes_on_after_another_process_forgot_its_thread(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        str(request.getfixturevalue("pg_url"))
        if kind == "postgres"
        else f"sqlite:///{tmp_path / 'memory.db'}"
    )
    with Memory.from_url(url, settings=Settings(embedder="fake")) as memory:
        node = ContextCardNode(memory, thread_id="t", user_id="maya")
        node({"messages": [HumanMessage("my secret", id="m1")]})
        child = context().Process(target=erase_worker, args=(url, "maya", str(tmp_path / "erased.json")))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert json.loads((tmp_path / "erased.json").read_text())["storage compacted"].startswith("yes")
        node({"messages": [HumanMessage("my secret", id="m1"), HumanMessage("after", id="m2")]})
        thread = memory.get_thread("t")
        assert [m.content for m in thread.messages()] == ["after"]
        assert thread.user_id == "maya"
