"""A process killed with SIGKILL in the middle of a turn leaves a database that opens, with every
committed checkpoint readable and the thread able to go on (a real subprocess, SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from remem.checkpoint import PostgresSaver, SqliteSaver

_CHILD = textwrap.dedent(
    """
    import sys, time
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from remem.checkpoint import PostgresSaver, SqliteSaver

    kind, target = sys.argv[1], sys.argv[2]

    def reply(state):
        time.sleep(0.002)
        said = state["messages"][-1].content
        return {"messages": [AIMessage("reply to " + said + " " + "word " * 200)]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    opener = SqliteSaver if kind == "sqlite" else PostgresSaver
    with opener.from_conn_string(target) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "crash"}}
        if graph.get_state(config).next:  # a turn the last kill interrupted: finish it first
            graph.invoke(None, config)
        i = len(graph.get_state(config).values.get("messages", [])) // 2
        while True:
            graph.invoke({"messages": [{"role": "user", "content": f"turn {i}"}]}, config)
            print(f"done {i}", flush=True)
            i += 1
    """
)


def _kill_mid_turn(kind: str, target: str, after_turns: int, delay: float) -> int:
    """Runs turns in a child until ``after_turns`` are done, then kills it ``delay`` s into the next."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind, target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    done = -1
    try:
        for line in child.stdout:
            done = int(line.split()[1])
            if done >= after_turns:
                break
        time.sleep(delay)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    return done


def _check_consistent(saver: Any, at_least_turns: int) -> None:
    config = {"configurable": {"thread_id": "crash"}}
    tuples = list(saver.list(config))
    assert tuples, "no checkpoint survived"
    for tup in tuples:  # every committed checkpoint reads back whole
        again = saver.get_tuple(tup.config)
        assert again is not None and again.checkpoint == tup.checkpoint
        messages = tup.checkpoint["channel_values"].get("messages", [])
        for i, message in enumerate(messages):
            turn = i // 2
            if i % 2 == 0:
                assert isinstance(message, HumanMessage) and message.content == f"turn {turn}"
            else:
                assert isinstance(message, AIMessage) and message.content.startswith(f"reply to turn {turn} ")
    latest = saver.get_tuple(config)
    assert len(latest.checkpoint["channel_values"]["messages"]) >= 2 * (at_least_turns + 1)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_sigkill_mid_turn_leaves_a_consistent_database(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "crash.db")
    opener: Any = SqliteSaver if kind == "sqlite" else PostgresSaver
    done = -1
    for delay in (0.0, 0.003, 0.011):
        done = _kill_mid_turn(kind, target, after_turns=done + 3, delay=delay)
        if kind == "sqlite":
            import sqlite3

            with sqlite3.connect(target) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        with opener.from_conn_string(target) as saver:
            _check_consistent(saver, at_least_turns=done)
