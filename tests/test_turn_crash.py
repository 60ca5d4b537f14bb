"""No crash window: a turn killed (SIGKILL) after any of its writes is finished, never dropped, by the next
``run_turn`` in a fresh process, and a reply that was saved is not paid for again.

The killed child wraps its saver so that right after its N-th ``put`` or ``put_writes`` it kills itself:
N walks every write of a turn (the input, each node's pending writes, each checkpoint), on a plain turn
and on one that compacts; then a few kills at random moments. Before each next turn the test reads what
the killed one left (the replies ``get_state`` shows), and afterwards checks that none of them was dropped
and that the fresh process called the model once per reply it added, no more.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests import matrix
from tests.lease_workers import THREAD, agent_for, context, crash_worker, open_saver

CONFIG = {"configurable": {"thread_id": THREAD}}
RANDOM_KILLS = 3


def _target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "crash.db")


class Chain:
    """Children one after another on one thread: each finishes after the last one's kill, then is killed."""

    def __init__(self, kind: str, target: str, strategy: str, tmp_path: Path, saver: Any) -> None:
        self.kind, self.target, self.strategy, self.tmp = kind, target, strategy, tmp_path
        self.agent = agent_for(saver, strategy)
        self.step = 0
        self.before: set[str] = set()  # the replies the last kill left visible
        self.asked = False  # whether the killed turn's input was written (a checkpoint holds it)
        self.question = ""
        self.problems: list[str] = []

    def _look(self, question: str) -> None:
        """What the kill left, as any reader sees it: the replies, and whether the input is in the thread
        (in the messages, or in the input checkpoint's ``__start__`` task not yet applied)."""
        snapshot = self.agent.get_state(CONFIG)
        messages = snapshot.values.get("messages", [])
        self.before = {m.text for m in messages if m.type == "ai"}
        self.asked = any(m.text == question for m in messages) or any(
            t.name == "__start__" for t in snapshot.tasks
        )
        self.question = question

    def run(self, question: str, kill_after: int, *, kill_at_random: bool = False) -> dict[str, Any]:
        """Start the next child (its follow-up turn checks the last kill), kill it in ``question``."""
        self.step += 1
        out = str(self.tmp / f"step-{self.step}.json")
        follow_up = f"follow-up {self.step}" if self.step > 1 else ""
        child = context().Process(
            target=crash_worker,
            args=(self.kind, self.target, self.strategy, follow_up, question, kill_after, out),
        )
        child.start()
        if kill_at_random:
            deadline = time.monotonic() + 60
            while not os.path.exists(out) and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(random.uniform(0.0, 0.25))
            os.kill(child.pid or 0, signal.SIGKILL)
        child.join(60)
        result: dict[str, Any] = json.loads(Path(out).read_text())
        if follow_up:
            self._check(follow_up, result)
        killed = child.exitcode == -signal.SIGKILL
        if not killed and Path(out + ".writes").exists():
            result["writes"] = int(Path(out + ".writes").read_text())
        elif not killed:
            self.problems.append(f"step {self.step}: the child failed (exit code {child.exitcode})")
        self._look(question)
        return result

    def _check(self, follow_up: str, result: dict[str, Any]) -> None:
        where = f"step {self.step} (after a kill in {self.question!r})"
        messages = result["messages"]
        after = {text for kind, text in messages if kind == "ai"}
        if not result["valid"]:
            self.problems.append(f"{where}: the history is not provider-valid")
        if messages[-2:] != [["human", follow_up], ["ai", "reply to " + follow_up]]:
            self.problems.append(f"{where}: the follow-up did not get its reply")
        if self.strategy == "filter":  # nothing is compacted away: every question keeps its reply
            dropped = self.before - after
            if dropped:
                self.problems.append(f"{where}: saved replies dropped: {sorted(dropped)}")
            asked = [text for kind, text in messages if kind == "human"]
            if len(asked) != len(set(asked)):
                self.problems.append(f"{where}: a question was stored twice")
            if self.asked and self.question not in asked and not self.question.startswith("random"):
                self.problems.append(f"{where}: the killed turn's input was dropped")
            for i, (kind, text) in enumerate(messages):
                if kind == "human" and messages[i + 1 : i + 2] != [["ai", "reply to " + text]]:
                    self.problems.append(f"{where}: {text!r} has no reply")
            paid = len(after - self.before)
        else:  # compaction keeps the last four: the killed turn's question and reply, then the follow-up
            saved = "reply to " + self.question in self.before
            expected = [["human", self.question], ["ai", "reply to " + self.question]]
            if self.asked and messages[-4:-2] != expected:
                self.problems.append(f"{where}: the killed turn is not finished in the state")
            if not self.asked and ["human", self.question] in messages:
                self.problems.append(f"{where}: a turn no reader saw came back")
            paid = 1 if saved or not self.asked else 2
        if result["calls"] != paid:
            self.problems.append(f"{where}: {result['calls']} model calls for {paid} new replies")


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
@pytest.mark.parametrize("strategy", ["filter", "summary"])
def test_a_kill_after_any_write_of_a_turn_loses_no_reply(
    kind: str, strategy: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _target(kind, tmp_path, request)
    with open_saver(kind, target) as saver:
        chain = Chain(kind, target, strategy, tmp_path, saver)
        for warm in range(3 if strategy == "summary" else 1):  # past the summary trigger: every turn compacts
            writes = chain.run(f"warm-up {warm}", 10**6).get("writes", 0)
        assert writes >= 5, chain.problems  # input, its pending writes, a checkpoint, the reply, a checkpoint
        for n in range(1, writes + 1):
            chain.run(f"question {n}", n)
        chain.run("the end", 10**6)
    print(kind, strategy, f"{writes} kill points:", chain.problems)
    assert chain.problems == []


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_kills_at_random_moments_lose_no_reply(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _target(kind, tmp_path, request)
    random.seed(f"remem-{kind}")
    with open_saver(kind, target) as saver:
        chain = Chain(kind, target, "filter", tmp_path, saver)
        chain.run("warm-up", 10**6)
        for n in range(RANDOM_KILLS):
            chain.run(f"random {n}", 0, kill_at_random=True)
        chain.run("the end", 10**6)
    print(kind, "random kills:", chain.problems)
    assert chain.problems == []
