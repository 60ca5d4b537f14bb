"""The built-in job kinds besides extraction: a summary refresh queued by an ingestion and run by a
worker, and a thread's messages re-indexed (embedded again) by a ``reindex`` job."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from langgraph.store.base import PutOp

from remem import Memory
from remem.cli import main
from remem.ingestion import begin_ingestion, undo_ingestion
from remem.jobs import BuiltinHandlers, open_queue, run_workers
from remem.layout import thread_messages
from remem.testing import offline_settings

SETTINGS = offline_settings()


def _drain(url: str) -> int:
    handlers = BuiltinHandlers(url, settings=SETTINGS)
    try:
        with open_queue(url) as queue:
            return run_workers(queue, handlers.as_mapping(), until_empty=True)
    finally:
        handlers.close()


def test_an_ingestion_queues_summary_refreshes_that_a_worker_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with Memory.from_url(url, settings=SETTINGS) as memory, open_queue(url) as queue:
        with begin_ingestion(memory, kind="load", queue=queue) as ing:
            ing.add_messages(
                "t1", [{"role": "user", "content": f"I grow tomato {n}.", "id": f"m{n}"} for n in range(6)]
            )
        assert memory.get_thread("t1").info().summary_revision == 0  # nothing summarised yet
    assert _drain(url) == 1
    with Memory.from_url(url, settings=SETTINGS) as memory, open_queue(url) as queue:
        thread = memory.get_thread("t1")
        assert thread.info().summary_revision == 1 and "tomato" in thread.summaries()[-1].text
        thread.add_messages([{"role": "user", "content": "I also keep bees.", "id": "k1"}])
        with begin_ingestion(memory, kind="load", queue=queue) as again:
            again.add_messages("t1", [{"role": "user", "content": "I grow melons.", "id": "x1"}])
        assert _drain(url) == 1
        assert "melons" in thread.summaries()[-1].text
        undo_ingestion(memory, again.id, queue=queue)  # the stale revision is rebuilt by the worker
    assert _drain(url) == 1
    with Memory.from_url(url, settings=SETTINGS) as memory:
        latest = memory.get_thread("t1").summaries()[-1]
        assert latest.covered_count == 7 and "melons" not in latest.text and "bees" in latest.text


def test_a_reindex_job_embeds_a_threads_messages_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = memory.thread("t1", user_id="maya")
        thread.add_messages([{"role": "user", "content": "The zebra sleeps standing.", "id": "z1"}])
        indexed = memory.store.stats()["vectors"]  # type: ignore[attr-defined]  # its text, who said it when
        item = memory.store.get(thread_messages("t1"), "z1")
        assert item is not None
        memory.store.batch([PutOp(thread_messages("t1"), "z1", item.value, index=False)])  # its vector gone
        assert memory.store.stats()["vectors"] == 0  # type: ignore[attr-defined]
    queued = CliRunner().invoke(main, ["queue", "reindex", "--thread", "t1", "--thread", "gone", "--db", url])
    assert queued.exit_code == 0 and "queued: 2 reindex job(s)" in queued.output  # "gone": nothing to index
    assert _drain(url) == 2
    with Memory.from_url(url, settings=SETTINGS) as memory:
        assert memory.store.stats()["vectors"] == indexed > 0  # type: ignore[attr-defined]
        assert [r.id for r in memory.search("zebra", thread_id="t1")] == ["z1"]
        assert [m.id for m in memory.get_thread("t1").messages()] == ["z1"]  # the same message, once
