"""Ingestions and the rest of the system: an erasure during a load, the jobs an undo leaves queued, an
import of stock checkpoints and an extraction run as ingestions."""

from __future__ import annotations

import json

from remem import Memory
from remem.ingestion import begin_ingestion, get_ingestion, list_ingestions, undo_ingestion
from remem.testing import offline_settings

SETTINGS = offline_settings()


def test_a_load_in_flight_does_not_write_an_erased_user_back(db_url: str) -> None:
    """A load names maya, maya is erased while it runs, then the load goes on (names another thread and
    closes): the entry it writes keeps none of maya's ids. Before, each save wrote the load's whole entry
    back, erased ids included."""
    from remem.erasure import erase

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        ing = begin_ingestion(memory, kind="load", source="crm.jsonl")
        ing.add_messages(
            "maya-chat", [{"role": "user", "content": "maya likes kites", "id": "m1"}], user_id="maya"
        )
        ing.add_memories("maya", ["prefers email"])
        assert "maya" in json.dumps(get_ingestion(memory, ing.id).to_value())

        erase(db_url, user_id="maya")  # between two writes of the load

        ing.add_messages(
            "bob-chat", [{"role": "user", "content": "bob likes boats", "id": "b1"}], user_id="bob"
        )
        ing.close()
        entry = get_ingestion(memory, ing.id)
        assert "maya" not in json.dumps(entry.to_value())
        assert entry.threads == {"bob-chat": True} and entry.users == [] and entry.state == "done"
        assert undo_ingestion(memory, ing.id).messages == 1


def test_a_load_erased_whole_while_loading_leaves_no_entry(db_url: str) -> None:
    from remem.erasure import erase

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        ing = begin_ingestion(memory, kind="load", source="maya.jsonl")
        ing.add_memories("maya", ["prefers email"])
        erase(db_url, user_id="maya")
        ing.close()
        assert [e.id for e in list_ingestions(memory)] == []


def test_an_undo_takes_out_the_jobs_queued_on_what_it_removes(db_url: str) -> None:
    """The load's summary refreshes and the extraction jobs of its messages leave the queue (queued or
    parked); an extraction job holding one of the thread's own messages too keeps that one; other threads'
    jobs stay. Before, the undo left them queued (the runbook said to park them by hand)."""
    from langchain_core.messages import HumanMessage

    from remem.extraction.tools import enqueue_extraction
    from remem.jobs import open_queue

    with Memory.from_url(db_url, settings=SETTINGS) as memory, open_queue(db_url) as queue:
        memory.thread("t1", user_id="maya").add_messages(
            [{"role": "user", "content": "I live in Paris.", "id": "a1"}]
        )
        with begin_ingestion(memory, kind="load", queue=queue) as ing:
            ing.add_messages("t1", [{"role": "user", "content": "I moved to Lyon.", "id": "b1"}])
            ing.add_messages("t2", [{"role": "user", "content": "zebra day", "id": "c1"}], user_id="maya")
        mixed = enqueue_extraction(
            queue,
            [HumanMessage("I live in Paris.", id="a1"), HumanMessage("I moved to Lyon.", id="b1")],
            user_id="maya",
            thread_id="t1",
        )
        loaded = enqueue_extraction(
            queue, [HumanMessage("zebra day", id="c1")], user_id="maya", thread_id="t2"
        )
        other = enqueue_extraction(queue, [HumanMessage("kites", id="k1")], user_id="bob", thread_id="t3")
        assert loaded is not None and queue.park(loaded, "endpoint down") == 1

        report = undo_ingestion(memory, ing.id, queue=queue)

        assert report.jobs == 4  # two summary refreshes, one extraction cut, one removed
        jobs = sorted((j.kind, j.thread_id, j.status) for j in queue.jobs())
        assert jobs == [
            ("extraction", "t1", "queued"),
            ("extraction", "t3", "queued"),
            ("summary", "t1", "queued"),
        ]
        assert mixed is not None and other is not None
        assert [m["data"]["id"] for m in queue.get(mixed).payload["messages"]] == ["a1"]
        assert [m["data"]["id"] for m in queue.get(other).payload["messages"]] == ["k1"]
        again = undo_ingestion(memory, ing.id, queue=queue)
        assert again.jobs == 4 and len(queue.jobs()) == 3  # done: nothing more taken out
