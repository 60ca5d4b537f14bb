"""The PostgreSQL store's exact vector path (a server without pgvector) keeps an in-process matrix of the
namespaces it searched, read again only after another writer changed them (store schema v7's counts per
namespace; issue 22, points 1 and 4: a card made several searches, each reading the thread's every vector).

Work is counted, never timed: the vector rows each search reads from the database.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.base import PutOp

from remem import Memory
from remem.store import AsyncPostgresStore, PostgresStore
from remem.testing import FakeEmbedder, offline_settings

pytestmark = pytest.mark.postgres

NS = ("docs",)
OTHER = ("other",)
INDEX: dict[str, Any] = {"dims": 16, "embed": FakeEmbedder(16), "fields": ["text"]}


def _count_vector_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each statement that reads stored embeddings (a search's, a write's look-up)."""
    read: list[int] = []
    run = store._execute

    def counting(conn: Any, request: Any) -> Any:
        rows = run(conn, request)
        if "embedding FROM remem_vectors" in request.sql:
            read.append(len(rows))
        return rows

    monkeypatch.setattr(store, "_execute", counting)
    return read


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database (as two processes would hold them), 40 items under NS, 5 under OTHER."""
    with (
        PostgresStore.from_conn_string(pg_url, index=INDEX) as a,
        PostgresStore.from_conn_string(pg_url, index=INDEX) as b,
    ):
        assert a.vector_kind == "exact"
        a.batch([PutOp(NS, f"d{i}", {"text": f"note number {i} about apples"}) for i in range(40)])
        a.batch([PutOp(OTHER, f"o{i}", {"text": f"other note {i}"}) for i in range(5)])
        yield a, b


def _keys(store: PostgresStore, query: str, ns: tuple[str, ...] = NS) -> list[str]:
    return [h.key for h in store.search(ns, query=query, limit=3)]


def test_the_first_search_reads_the_namespace_and_the_next_reads_none(
    two: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = two
    read = _count_vector_reads(a, monkeypatch)
    assert _keys(a, "note number 7 about apples")[0] == "d7"
    assert sum(read) == 40  # its namespace only, not OTHER's
    for i in (3, 11, 29):
        assert _keys(a, f"note number {i} about apples")[0] == f"d{i}"
    assert sum(read) == 40
    a.put(NS, "own", {"text": "an own note about pears"})  # its own write reaches the matrix in place
    a.delete(NS, "d3")
    assert _keys(a, "an own note about pears")[0] == "own"
    assert "d3" not in _keys(a, "note number 3 about apples")
    assert sum(read) == 40
    assert _keys(a, "other note 2", OTHER)[0] == "o2"
    assert sum(read) == 45  # another namespace: read when first searched


def test_a_vector_written_replaced_or_erased_elsewhere_is_seen(
    two: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    _keys(a, "apples")
    _keys(a, "other note 1", OTHER)
    read = _count_vector_reads(a, monkeypatch)
    b.put(NS, "new", {"text": "a note about cherries"})
    assert _keys(a, "a note about cherries")[0] == "new"
    assert read == [41]  # read again, that namespace alone
    b.put(NS, "new", {"text": "now it is about plums"})  # the same row, its vector replaced in place
    assert _keys(a, "now it is about plums")[0] == "new"
    b.delete_items([NS])  # the erasure's delete
    assert _keys(a, "now it is about plums") == []  # an erased vector is never returned
    assert _keys(a, "other note 1", OTHER)[0] == "o1"
    assert read == [41, 41, 0]  # OTHER did not change: not read again


def test_a_write_elsewhere_between_a_searchs_counts_and_its_own_write_is_not_lost(
    two: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    _keys(a, "apples")
    b.put(NS, "theirs", {"text": "their note about figs"})  # a's matrix is stale now
    a.put(NS, "mine", {"text": "my note about dates"})  # its count moved twice: the matrix drops NS
    read = _count_vector_reads(a, monkeypatch)
    assert _keys(a, "their note about figs")[0] == "theirs"
    assert _keys(a, "my note about dates")[0] == "mine"
    assert read == [42]


def _writer(url: str, key: str, text: str) -> None:
    with PostgresStore.from_conn_string(url, index=INDEX) as store:
        if text:
            store.put(NS, key, {"text": text})
        else:
            store.delete(NS, key)


def test_another_process_writes_and_deletes_are_seen_by_the_next_search(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, _ = two
    url = a._dsn
    assert url is not None
    _keys(a, "apples")
    context = multiprocessing.get_context("spawn")

    def other_process(key: str, text: str) -> None:
        process = context.Process(target=_writer, args=(url, key, text))
        process.start()
        process.join(60)
        assert process.exitcode == 0

    other_process("p", "a process wrote about quinces")
    assert _keys(a, "a process wrote about quinces")[0] == "p"
    other_process("d5", "")
    assert "d5" not in _keys(a, "note number 5 about apples")
    other_process("p", "")
    assert "p" not in _keys(a, "a process wrote about quinces")


def test_a_commit_that_changes_no_vector_keeps_the_matrix(
    two: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    _keys(a, "apples")
    read = _count_vector_reads(a, monkeypatch)
    b.put(NS, "d1", {"text": "note number 1 about apples"})  # the same text: its vector is not rewritten
    with psycopg.connect(str(a._dsn), autocommit=True) as conn:
        conn.execute("UPDATE remem_items SET updated_at = updated_at + 1")
    assert _keys(a, "note number 1 about apples")[0] == "d1"
    assert sum(read) == 0


def test_the_async_store_keeps_the_matrix_too(pg_url: str) -> None:
    async def main() -> None:
        async with AsyncPostgresStore.from_conn_string(pg_url, index=INDEX) as store:
            await store.abatch(
                [PutOp(NS, f"d{i}", {"text": f"note number {i} about apples"}) for i in range(20)]
            )
            read: list[int] = []
            run = store._aexecute

            async def counting(conn: Any, request: Any) -> Any:
                rows = await run(conn, request)
                if "embedding FROM remem_vectors" in request.sql:
                    read.append(len(rows))
                return rows

            store._aexecute = counting  # type: ignore[method-assign]
            hits = await store.asearch(NS, query="note number 4 about apples", limit=2)
            assert hits[0].key == "d4"
            await store.aput(NS, "own", {"text": "an own note about pears"})
            await store.adelete(NS, "d4")
            hits = await store.asearch(NS, query="an own note about pears", limit=2)
            assert hits[0].key == "own"
            assert "d4" not in [h.key for h in await store.asearch(NS, query="note number 4 about apples")]
            assert sum(read) == 20

    asyncio.run(main())


def test_a_card_refresh_reads_no_vector_again(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Memory.from_url(pg_url, settings=offline_settings()) as memory:
        thread = memory.thread("t", user_id="u")
        thread.add_messages(
            [HumanMessage(f"My locker {i} is in building {i % 7}.", id=f"m{i}") for i in range(120)]
        )
        thread.get_context_card()
        read = _count_vector_reads(memory.store, monkeypatch)
        for n in range(3):
            thread.add_messages(
                [HumanMessage(f"My cousin {n} moved to Porto.", id=f"x{n}"), AIMessage("Noted.", id=f"y{n}")]
            )
            card = thread.get_context_card()
        assert card.content
        assert sum(read) == 0


def test_a_database_written_before_the_counts_is_migrated(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresStore.from_conn_string(pg_url, index=INDEX) as store:
        store.batch([PutOp(NS, f"d{i}", {"text": f"note number {i} about apples"}) for i in range(10)])
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as store schema v6 left it
        for event in ("insert", "update", "delete"):
            conn.execute(f"DROP TRIGGER remem_vectors_changed_{event} ON remem_vectors")
        conn.execute("DROP FUNCTION remem_vectors_changed()")
        conn.execute("DROP TABLE remem_vector_changes")
        conn.execute("DELETE FROM remem_schema WHERE component = 'store' AND version = 7")
    with (
        PostgresStore.from_conn_string(pg_url, index=INDEX) as a,
        PostgresStore.from_conn_string(pg_url, index=INDEX) as b,
    ):
        read = _count_vector_reads(a, monkeypatch)
        assert _keys(a, "note number 2 about apples")[0] == "d2"
        b.put(NS, "late", {"text": "a late note about kiwis"})
        assert _keys(a, "a late note about kiwis")[0] == "late"
        assert read == [10, 11]
