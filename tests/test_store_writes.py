"""Rewriting an item replaces its keyword text and vectors exactly: nothing stale stays searchable.

Puts skip statements where they can (a namespace is looked up before it is created, one put's upsert
returns its id, vectors are upserted in place and only paths an item lost are deleted); these tests check
the stored rows after each kind of rewrite, on every backend.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest
from langgraph.store.base import PutOp

from remem.testing import FakeEmbedder


def _vector_paths(store: Any) -> list[tuple[str, str]]:
    rows = store.conn.execute(
        "SELECT i.key, v.path FROM remem_vectors v JOIN remem_items i ON i.id = v.item_id"
    ).fetchall()
    return sorted((r[0], r[1]) for r in rows)


def test_rewrites_replace_vectors_and_keyword_text(make_store: Any) -> None:
    index = {"dims": 16, "embed": FakeEmbedder(16, seed=2), "fields": ["tags[*]"]}
    store = make_store(index=index, search_mode="keyword")
    ns = ("users", "u1", "memories")
    store.put(ns, "a", {"tags": ["tea", "garden", "river"]})
    store.put(ns, "b", {"tags": ["coffee"]})
    assert _vector_paths(store) == [
        ("a", "tags[*].0"),
        ("a", "tags[*].1"),
        ("a", "tags[*].2"),
        ("b", "tags[*]"),
    ]
    store.put(ns, "a", {"tags": ["bread", "garden"]})  # one path fewer, one text changed
    assert _vector_paths(store) == [("a", "tags[*].0"), ("a", "tags[*].1"), ("b", "tags[*]")]
    assert store.search(ns, query="river") == [] and store.search(ns, query="tea") == []
    assert [h.key for h in store.search(ns, query="bread")] == ["a"]
    store.put(ns, "a", {"tags": ["bread"]}, index=False)  # no longer embedded at all
    assert _vector_paths(store) == [("b", "tags[*]")]
    store.batch(
        [PutOp(ns, "b", {"tags": ["x", "y"]}), PutOp(("users", "u2", "memories"), "c", {"tags": ["z"]})]
    )
    assert _vector_paths(store) == [("b", "tags[*].0"), ("b", "tags[*].1"), ("c", "tags[*]")]
    assert store.search(ns, query="coffee") == []


def test_vector_search_sees_rewritten_vectors(make_store: Any) -> None:
    embedder = FakeEmbedder(16, seed=5)
    store = make_store(index={"dims": 16, "embed": embedder, "fields": ["text"]}, search_mode="vector")
    ns = ("threads", "t1", "messages")
    store.put(ns, "m", {"text": "walk in the park"})
    store.put(ns, "n", {"text": "train tickets"})
    store.put(ns, "m", {"text": "train tickets booked"})
    hits = store.search(ns, query="train tickets booked", limit=2)
    assert [h.key for h in hits] == ["m", "n"]
    assert hits[0].score is not None and abs(hits[0].score - 1.0) < 1e-4
    store.put(("threads", "t2", "messages"), "m", {"text": "train tickets booked"})  # same key, new namespace
    assert {h.namespace for h in store.search(("threads",), query="train tickets booked", limit=3)} == {
        ns,
        ("threads", "t2", "messages"),
    }


class _Meddling(FakeEmbedder):
    """Embeds as FakeEmbedder does, and records the texts; its first call runs ``meddle`` (another writer
    that changes an item between the batch's look-up of stored vectors and its write transaction)."""

    def __init__(self, meddle: Any = None) -> None:
        super().__init__(16, seed=2)
        self.meddle = meddle
        self.seen: list[str] = []
        self.store: Any = None
        self.in_transaction: list[bool] = []

    def embed_array(self, texts: list[str]) -> Any:
        self.seen.extend(texts)
        conn = self.store.conn
        if isinstance(conn, sqlite3.Connection):
            self.in_transaction.append(conn.in_transaction)
        else:
            self.in_transaction.append(conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)
        meddle, self.meddle = self.meddle, None
        if meddle is not None:
            meddle()
        return super().embed_array(texts)


def test_a_text_another_writer_changed_after_the_look_up_is_embedded_and_the_write_run_again(
    make_store: Any,
) -> None:
    ns, text = ("d",), "the tea garden by the river"
    embedder = _Meddling()
    store = make_store(index={"dims": 16, "embed": embedder, "fields": ["text"]}, search_mode="vector")
    embedder.store = store
    other = make_store(index={"dims": 16, "embed": FakeEmbedder(16, seed=2), "fields": ["text"]})
    store.put(ns, "k", {"text": text})
    assert embedder.seen == [text]
    # nothing of k needs embedding when the batch looks (its text is stored), but q does; while q embeds,
    # the other writer stores another text under k
    embedder.meddle = lambda: other.put(ns, "k", {"text": "coffee on a train"})
    store.batch([PutOp(ns, "k", {"text": text}), PutOp(ns, "q", {"text": "query text here"})])
    assert embedder.seen == [text, "query text here", text]  # the late text: embedded, then written
    assert embedder.in_transaction == [False, False, False]  # never while a transaction holds locks
    assert store.get(ns, "k").value == {"text": text}
    top = store.search(ns, query=text, limit=1)[0]
    assert top.key == "k" and top.score is not None and top.score > 0.99  # its vector is the text's own


@pytest.mark.postgres
def test_a_single_put_on_postgres_is_two_statements_and_keeps_the_old_words_out(pg_url: str) -> None:
    """The keyword rows are compared and replaced in one statement after the upsert: a put into an
    existing namespace costs BEGIN, two statements and COMMIT, and still replaces the words."""
    from remem.store import PostgresStore

    with PostgresStore.from_conn_string(pg_url, search_mode="keyword") as store:
        ns = ("users", "u1", "memories")
        store.put(ns, "first", {"text": "the namespace exists after this put"})
        sent: list[str] = []
        execute = store._execute

        def counting(conn: Any, request: Any) -> Any:
            sent.append(request.sql)
            return execute(conn, request)

        store._execute = counting
        store.put(ns, "a", {"text": "green tea by the river"})
        store.put(ns, "a", {"text": "green bread"})  # a rewrite: "tea" and "river" go, "green" stays
        store.put(ns, "a", {"text": "green bread"})  # unchanged: the keyword rows stay as they are
        assert len(sent) == 6
        assert [h.key for h in store.search(ns, query="bread green")] == ["a"]
        assert store.search(ns, query="river") == [] and store.search(ns, query="tea") == []


@pytest.mark.postgres
def test_concurrent_writers_of_one_item_leave_the_keyword_rows_of_its_final_text(pg_url: str) -> None:
    """Two stores (two sessions) rewrite one item at once: whichever text wins, the keyword rows are
    exactly its words (a statement that read the old words before waiting for the other writer's row
    lock would keep words that writer committed)."""
    import threading

    from remem.store import PostgresStore
    from remem.store._core import keyword_text
    from remem.store._text import index_terms

    texts = ["tea river garden", "bread cat", "miso dawn tea", "porto"]
    with (
        PostgresStore.from_conn_string(pg_url, search_mode="keyword") as one,
        PostgresStore.from_conn_string(pg_url, search_mode="keyword") as two,
    ):
        for round_ in range(10):  # the folded read lost words in about 4 rounds of 10
            ns = ("race", str(round_))
            one.put(ns, "k", {"text": "start"})

            def write(store: Any, offset: int, ns: tuple[str, ...] = ns) -> None:
                for i in range(60):
                    store.put(ns, "k", {"text": texts[(i + offset) % len(texts)]})

            threads = [threading.Thread(target=write, args=(s, n)) for n, s in ((0, one), (1, two))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            item = one.get(ns, "k")
            assert item is not None
            rows = one.conn.execute(
                "SELECT t.term, t.tf FROM remem_terms t JOIN remem_items i ON i.id = t.item_id "
                "JOIN remem_ns n ON n.id = i.ns_id WHERE i.key = 'k' AND n.path = %s",
                [".".join(ns)],
            ).fetchall()
            assert dict(rows) == dict(index_terms(keyword_text(item.value, []))), round_
