"""New turns embedded by the durable queue (``embed_turns = "queue"``): stored at once and unindexed, then
embedded and indexed by an ``embed`` job that a real ``remem worker`` process runs; running the job again
changes nothing; erasing a user removes their queued embed jobs."""

from __future__ import annotations

import os
import subprocess
import sys

from remem import Memory
from remem.jobs import EMBED_JOB, BuiltinHandlers, open_queue
from remem.testing import offline_settings

QUEUED = offline_settings(embed_turns="queue")


def test_new_turns_are_embedded_by_a_worker_process_when_embed_turns_is_queue(db_url: str) -> None:
    with Memory.from_url(db_url, settings=QUEUED) as memory:
        thread = memory.thread("t1", user_id="maya")
        thread.add_messages(
            [
                {"role": "user", "content": "The zebra sleeps standing.", "id": "z1"},
                {"role": "assistant", "content": "Noted, about sleep.", "id": "z2"},
            ]
        )
        assert [m.id for m in thread.messages()] == ["z1", "z2"]  # stored at once, in order
        assert memory.store.stats()["vectors"] == 0  # type: ignore[attr-defined]  # not embedded in the write
        assert memory.search("zebra", thread_id="t1") == []
    with open_queue(db_url) as queue:
        (job,) = queue.jobs()
        assert (job.kind, job.thread_id, job.user_id) == (EMBED_JOB, "t1", "maya")
        assert job.payload["message_ids"] == ["z1", "z2"]

    worker = subprocess.run(
        [sys.executable, "-m", "remem.cli", "worker", "--db", db_url, "--until-empty"],
        env={**os.environ, "REMEM_EMBEDDER": "fake"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr

    with Memory.from_url(db_url, settings=offline_settings()) as memory, open_queue(db_url) as queue:
        assert queue.get(job.id).status == "done"
        vectors = memory.store.stats()["vectors"]  # type: ignore[attr-defined]
        assert vectors > 0
        assert [r.id for r in memory.search("zebra", thread_id="t1")][:1] == ["z1"]
        handlers = BuiltinHandlers(db_url, settings=offline_settings())
        try:
            handlers.embed(job)  # again (as queued), as after a crash between the work and "done"
        finally:
            handlers.close()
        assert memory.store.stats()["vectors"] == vectors  # type: ignore[attr-defined]
        assert [m.id for m in memory.get_thread("t1").messages()] == ["z1", "z2"]


def test_erasing_a_user_removes_their_queued_embed_jobs(db_url: str) -> None:
    from remem.erasure import erase

    with Memory.from_url(db_url, settings=QUEUED) as memory:
        memory.thread("t1", user_id="maya").add_messages([{"role": "user", "content": "kites", "id": "k1"}])
        memory.thread("t2", user_id="bob").add_messages([{"role": "user", "content": "boats", "id": "b1"}])
    erase(db_url, user_id="maya")
    with open_queue(db_url) as queue:
        assert [(j.kind, j.thread_id) for j in queue.jobs()] == [(EMBED_JOB, "t2")]


def test_a_memory_in_this_process_refuses_queued_embedding() -> None:
    import pytest

    from remem.errors import ConfigError

    with pytest.raises(ConfigError, match="a worker can reach"):
        Memory.from_url("memory://", settings=QUEUED)
