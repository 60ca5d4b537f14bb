"""An erasure fences the writers that began before it: no turn in flight writes the erased texts back.

``remem forget --user`` (here :func:`remem.erasure.erase`, in a second process) runs while an agent turn
that read the thread before it is still waiting for its model. Before, the erasure finished ("compacted:
yes") and the turn then saved its state, the erased history included. Now a turn under ``run_turn`` holds
the thread's lease, so the erasure waits for it and erases what the turn wrote too; a bare ``invoke``
holds no lease between its writes, so its next checkpoint (whose parent the erasure deleted) is refused.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from remem import ScriptedChatModel, ThreadBusyError, run_turn
from remem.checkpoint import AsyncPostgresSaver, AsyncSqliteSaver
from remem.layout import CHECKPOINT_TABLES
from tests.lease_workers import THREAD, agent_for, context, erase_worker, open_saver

CONFIG = {"configurable": {"thread_id": THREAD, "user_id": "maya"}}


def _where(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    if kind == "postgres":
        url = str(request.getfixturevalue("pg_url"))
        return url, url
    path = tmp_path / "app.db"
    return str(path), f"sqlite:///{path}"


def _stored_text(saver: Any) -> str:
    """Everything the thread's checkpoints and pending writes hold, as text."""
    return repr([(t.checkpoint["channel_values"], t.pending_writes) for t in saver.list(CONFIG)])


def _rows_left(kind: str, target: str) -> dict[str, int]:
    """How many rows each checkpoint table holds, read past the saver: an orphan pending write (one whose
    checkpoint is gone) is listed by no read of the saver, but it still holds what was erased."""
    counts = {}
    if kind == "postgres":
        with psycopg.connect(target) as conn:
            for table in CHECKPOINT_TABLES:
                counts[table] = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        return counts
    with contextlib.closing(sqlite3.connect(target)) as conn:
        for table in CHECKPOINT_TABLES:
            counts[table] = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return counts


def _erasing_model(url: str, out: Path, children: list[Any], wait: float = 5) -> ScriptedChatModel:
    """A model that erases the thread's user while the turn's model call runs, waiting ``wait`` seconds for
    the erasure: a turn holds the thread's lease, so its erasure waits for the turn (before the fence it
    was done within 5 s); a bare invoke holds none, so the erasure finishes during the call, however long
    a loaded machine takes to start the process."""

    def reply(messages: Any) -> str:
        if messages[-1].text == "the second secret":  # the turn has read the thread: erase it now
            child = context().Process(target=erase_worker, args=(url, "maya", str(out)))
            child.start()
            children.append(child)
            child.join(wait)
        return "reply to " + messages[-1].text

    return ScriptedChatModel(default=reply)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_turn_in_flight_does_not_write_an_erased_thread_back(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target, url = _where(kind, tmp_path, request)
    out, children = tmp_path / "erased.json", []
    with open_saver(kind, target) as saver:
        agent = agent_for(saver, model=_erasing_model(url, out, children))
        run_turn(agent, THREAD, "the first secret", user_id="maya")
        run_turn(agent, THREAD, "the second secret", user_id="maya")
        children[0].join(60)
        assert children[0].exitcode == 0
        report = json.loads(out.read_text())
        assert report["storage compacted"].startswith("yes")
        assert "secret" not in _stored_text(saver)
        assert agent.get_state(CONFIG).values.get("messages", []) == []


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_bare_invoke_in_flight_is_refused_after_the_erasure(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target, url = _where(kind, tmp_path, request)
    out, children = tmp_path / "erased.json", []
    with open_saver(kind, target) as saver:
        agent = agent_for(saver, model=_erasing_model(url, out, children, wait=120))
        agent.invoke({"messages": [HumanMessage("the first secret")]}, CONFIG)
        with pytest.raises(ThreadBusyError, match="deleted or erased while this run was under way"):
            agent.invoke({"messages": [HumanMessage("the second secret")]}, CONFIG)
        children[0].join(60)
        assert children[0].exitcode == 0
        assert "secret" not in _stored_text(saver)
        # Not even the model's reply as a pending write of the erased checkpoint, nor the thread's row.
        assert _rows_left(kind, target) == dict.fromkeys(CHECKPOINT_TABLES, 0)
        assert agent.get_state(CONFIG).values.get("messages", []) == []


@contextlib.asynccontextmanager
async def _open_async_saver(kind: str, target: str) -> AsyncIterator[Any]:
    if kind == "postgres":
        async with AsyncPostgresSaver.from_conn_string(target) as pg:
            await pg.setup()
            yield pg
        return
    async with AsyncSqliteSaver.from_conn_string(target) as saver:
        yield saver


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_an_async_bare_invoke_in_flight_leaves_no_pending_write_after_the_erasure(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target, url = _where(kind, tmp_path, request)
    out, children = tmp_path / "erased.json", []
    async with _open_async_saver(kind, target) as saver:
        agent = agent_for(saver, model=_erasing_model(url, out, children, wait=120))
        await agent.ainvoke({"messages": [HumanMessage("the first secret")]}, CONFIG)
        with pytest.raises(ThreadBusyError, match="deleted or erased while this run was under way"):
            await agent.ainvoke({"messages": [HumanMessage("the second secret")]}, CONFIG)
        children[0].join(60)
        assert children[0].exitcode == 0
    assert _rows_left(kind, target) == dict.fromkeys(CHECKPOINT_TABLES, 0)
