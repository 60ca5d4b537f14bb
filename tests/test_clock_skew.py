"""Writers whose clocks disagree share a thread: "latest" and the head check follow the order of the writes.

A checkpoint id carries its writer's clock. When "latest" was the highest id, a process whose clock was
an hour ahead stayed the thread's latest for that hour: the other processes' turns were refused at
their second step ("another run wrote checkpoint ... after this run read the thread", a run that did
not exist) or vanished from ``get_state``; a process an hour behind never wrote a turn that counted.
Now the savers number each thread's checkpoints in the order they are written (``seq``), so each
turn, from any clock, lands after the one before it. Real processes on SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from remem import run_turn
from tests import matrix
from tests.clock_workers import THREAD, context, skewed_turn_worker
from tests.lease_workers import agent_for, open_saver

HOUR = 3600.0


@pytest.fixture(params=matrix.backend_params("sqlite", "postgres"))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return str(tmp_path / "app.db") if kind == "sqlite" else str(request.getfixturevalue("pg_url"))


def _turn_in_child(kind: str, target: str, seconds: float, question: str) -> None:
    child = context().Process(target=skewed_turn_worker, args=(kind, target, seconds, question))
    child.start()
    child.join(120)
    assert child.exitcode == 0, f"the turn from a clock {seconds:+g} s off failed"


def test_turns_from_clocks_an_hour_ahead_and_behind_follow_each_other(kind: str, target: str) -> None:
    _turn_in_child(kind, target, +HOUR, "from the future")
    with open_saver(kind, target) as saver:
        agent = agent_for(saver)
        run_turn(agent, THREAD, "from now")  # refused before: the future head was "latest" for an hour
    _turn_in_child(kind, target, -HOUR, "from the past")
    with open_saver(kind, target) as saver:
        agent = agent_for(saver)
        run_turn(agent, THREAD, "now again")
        state = agent.get_state({"configurable": {"thread_id": THREAD}})
        questions = [m.text for m in state.values["messages"] if m.type == "human"]
        assert questions == ["from the future", "from now", "from the past", "now again"]
        replies = [m.text for m in state.values["messages"] if m.type == "ai"]
        assert replies == [f"reply to {q}" for q in questions]


def test_a_prune_keeping_the_latest_keeps_the_last_written_not_the_highest_id(kind: str, target: str) -> None:
    """After a turn from a clock an hour ahead, the next turn's checkpoint has the lower id but is the head:
    ``prune(strategy="keep_latest")`` keeps it (it kept the future one, and the thread lost its last turn)."""
    _turn_in_child(kind, target, +HOUR, "from the future")
    with open_saver(kind, target) as saver:
        agent = agent_for(saver)
        run_turn(agent, THREAD, "from now")
        saver.prune([THREAD], strategy="keep_latest")
        kept = list(saver.list({"configurable": {"thread_id": THREAD}}))
        assert len(kept) == 1
        state = agent.get_state({"configurable": {"thread_id": THREAD}})
        assert [m.text for m in state.values["messages"] if m.type == "human"] == [
            "from the future",
            "from now",
        ]
