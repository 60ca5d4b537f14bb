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
