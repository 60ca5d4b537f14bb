"""The inspector's list of threads reads each thread's listing (``remem.layout.thread_listing``), kept by the
memory client wherever it writes a thread's metadata: a page costs the same store reads at 10 threads as at
200, and erasure and ingestion undo keep the listings as right as the metadata. Store reads are counted,
never timed."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from langgraph.store.base import Op, Result
from langgraph.store.memory import InMemoryStore

from remem import layout
from remem.erasure import forget
from remem.ingestion import begin_ingestion, undo_ingestion
from remem.memory import Memory
from remem.server._ui import _data
from remem.testing import offline_settings

SETTINGS = offline_settings()


class OpCountingStore(InMemoryStore):
    """LangGraph's in-memory store counting every operation it is sent (gets, searches, listings)."""

    ops = 0

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        given = list(ops)
        self.ops += len(given)
        return super().batch(given)


def _services(memory: Memory) -> Any:
    # what thread_rows uses of the service: each tenant's memory, and the shared one's meter (none here)
    return SimpleNamespace(memory=memory, memory_for=lambda tenant: memory)


def _reads_of_the_list(threads: int) -> tuple[int, list[_data.ThreadRow]]:
    store = OpCountingStore()
    memory = Memory(store)
    for n in range(threads):
        thread = memory.thread(f"t{n:03d}", user_id=f"u{n % 3}")
        thread.add_messages(
            [
                {"id": f"a{n}", "role": "user", "content": "hello", "timestamp": "2026-01-01T00:00:00Z"},
                {"id": f"b{n}", "role": "assistant", "content": "hi", "timestamp": f"2026-02-{1 + n % 28:02d}T10:00:00Z"},
            ][: 1 + n % 2]
        )  # fmt: skip
    store.ops = 0
    rows = _data.thread_rows(_services(memory), None)
    return store.ops, rows


def test_a_page_of_the_thread_list_reads_as_much_at_200_threads_as_at_10() -> None:
    few, rows = _reads_of_the_list(10)
    many, more = _reads_of_the_list(200)
    assert len(rows) == 10 and len(more) == 200
    assert many == few <= 2  # the listings' search and the older threads' namespaces, whatever the count
    by_id = {r.thread_id: r for r in more}
    assert (by_id["t007"].messages, by_id["t007"].last_activity) == (2, "2026-02-08T10:00:00Z")
    assert (by_id["t008"].messages, by_id["t008"].last_activity) == (1, "2026-01-01T00:00:00Z")
    assert by_id["t008"].user_id == "u2"


def test_a_thread_written_before_listings_existed_is_still_listed() -> None:
    memory = Memory(InMemoryStore())
    memory.thread("old", user_id="u").add_messages(
        [{"id": "m1", "role": "user", "content": "hi", "timestamp": "2025-05-05T05:05:05Z"}]
    )
    memory.store.delete(layout.thread_listing("old"), layout.THREAD_META_KEY)  # as remem 0.1 left it
    (row,) = _data.thread_rows(_services(memory), None)
    assert (row.thread_id, row.messages, row.last_activity) == ("old", 1, "2025-05-05T05:05:05Z")


def _listing(memory: Memory, thread_id: str) -> dict[str, Any] | None:
    item = memory.store.get(layout.thread_listing(thread_id), layout.THREAD_META_KEY)
    return None if item is None else dict(item.value)


def test_undoing_an_ingestion_puts_the_listing_back_and_erasure_takes_it(tmp_path: Path) -> None:
    with Memory.from_url(f"sqlite:///{tmp_path / 'm.db'}", settings=SETTINGS) as memory:
        memory.thread("kept", user_id="maya").add_messages(
            [{"id": "k1", "role": "user", "content": "I live in Paris", "timestamp": "2026-03-01T09:00:00Z"}]
        )
        before = _listing(memory, "kept")
        assert before is not None and before["message_count"] == 1
        assert before["last_activity"] == "2026-03-01T09:00:00Z"
        with begin_ingestion(memory, kind="load", source="crm.jsonl") as ing:
            ing.add_messages(
                "kept",
                [{"id": "k2", "role": "user", "content": "Lyon now", "timestamp": "2026-04-01T09:00:00Z"}],
                user_id="maya",
            )
            ing.add_messages("made", [{"id": "n1", "role": "user", "content": "new"}], user_id="maya")
        assert (_listing(memory, "kept") or {}).get("message_count") == 2
        assert _listing(memory, "made") is not None
        undo_ingestion(memory, ing.id)
        meta = memory.store.get(layout.thread_meta("kept"), layout.THREAD_META_KEY)
        assert meta is not None and _listing(memory, "kept") == meta.value
        after = _listing(memory, "kept") or {}
        assert (after["message_count"], after["last_activity"]) == (1, "2026-03-01T09:00:00Z")
        assert _listing(memory, "made") is None  # the thread the load made went whole
        memory.thread("other", user_id="otto").add_messages([{"id": "o1", "role": "user", "content": "x"}])
        memory.thread("mine2", user_id="maya").add_messages([{"id": "y1", "role": "user", "content": "y"}])
        forget(memory.store, thread_id="other")  # type: ignore[arg-type]
        assert _listing(memory, "other") is None
        forget(memory.store, user_id="maya")  # type: ignore[arg-type]
        assert _listing(memory, "kept") is None and _listing(memory, "mine2") is None
        assert [r.thread_id for r in _data.thread_rows(_services(memory), None)] == []
