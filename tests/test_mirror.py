"""Bare ``create_agent`` runs on one thread from several processes: the memory thread that
``ContextCardMiddleware`` keeps holds what the accepted checkpoints hold, and a run refused for
overtaking another is refused before its model call, so it is neither paid nor recorded in the ledger.

Real processes on a real SQLite file and the machine's PostgreSQL; only the model is scripted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remem import Memory, Settings
from remem.middleware._compaction import persistable
from remem.usage import ledger_for
from tests import matrix
from tests.lease_workers import THREAD, context, mirror_worker, open_saver

WORKERS = 3
TURNS = 6


def _run_children(args: list[tuple[Any, ...]]) -> None:
    children = [context().Process(target=mirror_worker, args=a) for a in args]
    for child in children:
        child.start()
    for child in children:
        child.join(180)
    assert [c.exitcode for c in children] == [0] * len(children)


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_the_memory_thread_and_the_ledger_follow_the_accepted_checkpoints(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "t.db")
    memory_url = target if kind == "postgres" else f"sqlite:///{target}"
    settings = Settings(embedder="fake")
    with open_saver(kind, target), Memory.from_url(memory_url, settings=settings):
        pass  # the tables exist before the children race to create them
    calls = [tmp_path / f"calls-{w}.txt" for w in range(WORKERS)]
    _run_children([(kind, target, memory_url, w, TURNS, str(calls[w])) for w in range(WORKERS)])
    paid = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in calls if p.exists())
    with open_saver(kind, target) as saver:
        head = saver.get_tuple({"configurable": {"thread_id": THREAD}})
        ledger = ledger_for(saver)
        recorded = len(ledger.events(thread_id=THREAD))
        ledger.close()
    kept = [t for t in map(persistable, head.checkpoint["channel_values"]["messages"]) if t is not None]
    with Memory.from_url(memory_url, settings=settings) as memory:
        mirrored = [(m.role, m.content) for m in memory.get_thread(THREAD).messages()]
    replies = sum(1 for t in kept if t["role"] == "assistant")
    print(kind, f"checkpoint {len(kept)} messages, memory {len(mirrored)}, paid {paid}, ledger {recorded}")
    assert replies > 0, "some runs land"
    assert mirrored == [(t["role"], t["content"]) for t in kept]
    assert (paid, recorded) == (replies, replies)
