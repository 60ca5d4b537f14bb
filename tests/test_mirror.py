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
from tests.lease_workers import THREAD, context, mirror_worker, node_mirror_worker, open_saver

WORKERS = 3
TURNS = 6


def _run_children(args: list[tuple[Any, ...]], worker: Any = mirror_worker) -> None:
    children = [context().Process(target=worker, args=a) for a in args]
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


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_context_card_node_mirrors_only_the_accepted_checkpoints(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``ContextCardNode`` in a plain ``StateGraph`` claims the thread for its step as the middleware does
    for a model call: a run overtaken stops there, before its turn is stored. Before, the memory thread
    also held the questions of runs whose checkpoints were refused. The model runs in a node of the
    app's own, which remem does not wrap, so a run overtaken during that call has paid for it (README)."""
    target = str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "t.db")
    memory_url = target if kind == "postgres" else f"sqlite:///{target}"
    settings = Settings(embedder="fake")
    with open_saver(kind, target), Memory.from_url(memory_url, settings=settings):
        pass
    calls = [tmp_path / f"calls-{w}.txt" for w in range(WORKERS)]
    _run_children(
        [(kind, target, memory_url, w, TURNS, str(calls[w])) for w in range(WORKERS)], node_mirror_worker
    )
    with open_saver(kind, target) as saver:
        head = saver.get_tuple({"configurable": {"thread_id": THREAD}})
    kept = [
        (t["role"], t["content"])
        for t in map(persistable, head.checkpoint["channel_values"]["messages"])
        if t
    ]
    with Memory.from_url(memory_url, settings=settings) as memory:
        mirrored = [(m.role, m.content) for m in memory.get_thread(THREAD).messages()]
    print(kind, f"checkpoint {len(kept)} messages, memory {len(mirrored)}")
    assert any(role == "assistant" for role, _ in kept), "some runs land"
    # The node stores what the checkpoint it runs from holds; the last reply waits for the next turn.
    assert mirrored == kept[: len(mirrored)]
    assert all(role == "assistant" for role, _ in kept[len(mirrored) :]) and len(kept) - len(mirrored) <= 1
