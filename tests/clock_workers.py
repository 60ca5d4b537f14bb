"""What the clock-skew tests run in child processes: agent turns from a process whose clock is off.

A child's clock is moved by patching the one time source LangGraph makes checkpoint ids from
(``langgraph.checkpoint.base.id``'s ``time.time_ns``), so the ids it writes carry the skewed time exactly
as a machine whose clock is wrong would write them; everything else in the child is as it would be.
"""

from __future__ import annotations

import multiprocessing
import time
import types
from typing import Any

from remem import run_turn
from tests.lease_workers import agent_for, open_saver

THREAD = "skewed"
_CONTEXT: Any = None


def context() -> Any:
    """The multiprocessing context the tests start children with (a preloaded forkserver)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["tests.clock_workers"])
    return _CONTEXT


def skew_clock(seconds: float) -> None:
    """Move this process's checkpoint-id clock by ``seconds`` (ahead when positive)."""
    import langgraph.checkpoint.base.id as ids

    offset = int(seconds * 1e9)
    ids.time = types.SimpleNamespace(time_ns=lambda: time.time_ns() + offset)  # type: ignore[attr-defined]


def skewed_turn_worker(kind: str, target: str, seconds: float, question: str) -> None:
    """One agent turn on :data:`THREAD` from a process whose clock is ``seconds`` off."""
    skew_clock(seconds)
    with open_saver(kind, target) as saver:
        run_turn(agent_for(saver), THREAD, question)
