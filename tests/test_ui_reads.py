"""What the inspector's pages read and write, without a browser. Store reads are counted, never timed.

The list of threads reads each thread's listing (``remem.layout.thread_listing``), kept by the memory
client wherever it writes a thread's metadata: a page costs the same store reads at 10 threads as at 200,
and erasure and ingestion undo keep the listings as right as the metadata. A page of a long thread reads
only the page; a card preview writes nothing; a memory is edited through the memory client's checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph.store.base import GetOp, Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from remem import layout
from remem.erasure import forget
from remem.ingestion import begin_ingestion, undo_ingestion
from remem.memory import Memory
from remem.server._ui import _data
from remem.testing import offline_settings
from tests.test_server_ui import BIG, _big

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


class CountingStore(InMemoryStore):
    """LangGraph's in-memory store counting the items each batch asks for and the writes it is sent."""

    reads = 0
    writes = 0

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        given = list(ops)
        self.reads += sum(isinstance(op, GetOp) for op in given)
        self.writes += sum(isinstance(op, PutOp) for op in given)
        return super().batch(given)


def test_a_card_preview_writes_nothing_where_a_turns_card_writes_a_summary() -> None:
    store = CountingStore()
    thread = Memory(store).thread("t", user_id="u", context_summary_update_frequency=1)
    thread.add_messages(
        [{"role": "user", "content": f"I like tea number {i}", "id": f"m{i}"} for i in range(6)]
    )
    store.writes = 0
    preview = thread.preview_context_card(max_recent_messages=2, except_last_messages=2)
    assert store.writes == 0 and thread.info().summary_revision == 0 and preview.summary == ""
    card = thread.get_context_card(max_recent_messages=2, except_last_messages=2)
    assert (
        store.writes > 0 and thread.info().summary_revision == 1 and card.summary
    )  # a turn's card extends it
    store.writes = 0
    thread.add_messages([{"role": "user", "content": "and coffee", "id": "m6"}])
    store.writes = 0
    again = thread.preview_context_card(max_recent_messages=2, except_last_messages=2)
    assert store.writes == 0 and again.summary == card.summary and again.summary_revision == 1


def test_a_memory_is_edited_and_deleted_through_the_memory_client_with_its_checks() -> None:
    from remem.errors import NotFoundError, RememUsageError

    memory = Memory(InMemoryStore())
    memory.store.put(("users", "maya", "memories"), "tea", {"content": "Maya drinks tea", "type": "fact"})
    value = memory.edit_memory("maya", "tea", "Maya drinks matcha")
    assert value["type"] == "fact" and memory.store.get(("users", "maya", "memories"), "tea").value == value  # type: ignore[union-attr]
    with pytest.raises(RememUsageError):
        memory.edit_memory("maya", "tea", "  ")
    with pytest.raises(NotFoundError):
        memory.edit_memory("maya", "coffee", "Maya drinks coffee")
    with pytest.raises(RememUsageError):
        memory.edit_memory("ma/ya", "tea", "text")  # a label the layout refuses
    with pytest.raises(RememUsageError):
        memory.delete_memory("ma/ya", "tea")
    with pytest.raises(NotFoundError):
        memory.delete_memory("maya", "coffee")
    memory.delete_memory("maya", "tea")
    assert memory.store.get(("users", "maya", "memories"), "tea") is None
    with pytest.raises(NotFoundError):
        memory.delete_memory("maya", "tea")  # said once: a second delete finds nothing


def _rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: sorted(map(tuple, conn.execute(f'SELECT * FROM "{n}"')), key=repr) for n in names}


def test_a_page_of_a_long_thread_reads_only_the_page() -> None:
    store = CountingStore()
    memory = Memory(store)
    thread = memory.thread("long", user_id="u")
    for start in range(0, BIG, 1000):
        thread.add_messages(_big(start))
    store.reads = 0
    page, total = thread.message_page(5000, 50)
    assert total == BIG
    assert [m.seq for m in page] == list(range(5000, 5050))
    assert store.reads <= 50 + 4  # the page's messages, its order chunk, the thread's metadata
    store.reads = 0
    last, _ = thread.message_page(BIG - 10, 50)
    assert [m.seq for m in last] == list(range(BIG - 10, BIG)) and store.reads <= 10 + 4


def test_a_server_without_keys_opens_its_pages_on_loopback_but_still_checks_forms(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from remem.server import ServerOptions, create_app
    from remem.testing import offline_settings

    db = f"sqlite:///{tmp_path / 'open.db'}"
    with Memory.from_url(db, settings=offline_settings()) as memory:
        memory.thread("notes", user_id="me").add_messages(
            [{"role": "user", "content": "<i>mine</i>", "id": "n1"}]
        )
    app = create_app(ServerOptions(db), settings=offline_settings())
    with TestClient(app, base_url="http://127.0.0.1") as c:
        listing = c.get("/ui/threads")
        assert listing.status_code == 200 and "notes" in listing.text
        assert "local database (no keys)" in listing.text
        thread = c.get("/ui/thread", params={"id": "notes"})
        assert "&lt;i&gt;mine&lt;/i&gt;" in thread.text and "<i>mine</i>" not in thread.text
        assert thread.headers["content-security-policy"].startswith("default-src 'none'")
        before = _rows(tmp_path / "open.db")
        card = c.get("/ui/thread/card", params={"id": "notes"})
        assert card.status_code == 200 and "without writing anything" in card.text
        assert _rows(tmp_path / "open.db") == before  # reads never write: no summary revision, no row
        c.cookies.set("remem_csrf", "y" * 43)
        refused = c.post("/ui/forget", data={"user": "me"})
        assert refused.status_code == 403
        assert c.get("/ui/thread", params={"id": "notes"}).status_code == 200  # nothing was erased


def test_threads_are_searched_by_what_their_messages_say_in_one_store_search(tmp_path: Path) -> None:
    from remem.server._tenancy import TenantStore

    with Memory.from_url(f"sqlite:///{tmp_path / 's.db'}", settings=SETTINGS) as memory:
        tenant_a, tenant_b = Memory(TenantStore(memory.store, "a")), Memory(TenantStore(memory.store, "b"))
        for n in range(3):
            tenant_a.thread(f"chat{n}", user_id="maya" if n else "leo").add_messages(
                [
                    {"id": "m0", "role": "user", "content": f"note {n}: bees in the garden"},
                    {"id": "m1", "role": "user", "content": "the bees swarmed the garden bees" if n == 2 else "ok"},
                ]
            )  # fmt: skip
        tenant_b.thread("secret", user_id="maya").add_messages(
            [{"id": "s", "role": "user", "content": "bees"}]
        )
        hits = tenant_a.search_threads("bees", k=10)
        assert sorted(h.thread_id for h in hits) == ["chat0", "chat1", "chat2"]  # one per thread, a's only
        assert hits[0].thread_id == "chat2" and hits[0].seq == 1 and hits[0].signals.get("keyword", 0) > 0
        assert [h.thread_id for h in tenant_a.search_threads("bees", user_id="leo")] == ["chat0"]
        assert tenant_a.search_threads("bees", k=1)[0].thread_id == "chat2"
        assert tenant_a.search_threads("hello there") == []  # chit-chat finds nothing
        assert [h.thread_id for h in tenant_b.search_threads("garden bees")] == ["secret"]


def test_the_services_code_imports_nothing_of_the_inspector() -> None:
    # /v1, the LangGraph API, MCP and the erasure read through the public API; only the app mounts /ui
    import ast

    import remem.server

    root = Path(remem.server.__file__).parent
    found = []
    for path in sorted(root.glob("*.py")):
        if path.name == "_app.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            if any(n.startswith("remem.server._ui") for n in names):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []
