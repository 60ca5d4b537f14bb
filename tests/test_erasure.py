"""Erasure leaves no trace: not in the rows, not in the keyword index, not in the vectors, not in the file."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from remem.embeddings import CachedEmbedder, text_hash
from remem.erasure import forget
from remem.layout import thread_messages, user_memories
from remem.store import PostgresStore, SqliteStore, hybrid_search
from remem.testing import FakeEmbedder

INDEX_FIELDS = ["text"]


def _secret() -> str:
    return "Zq" + uuid.uuid4().hex  # a token no English text contains


def _file_bytes(path: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        part = Path(str(path) + suffix)
        if part.exists():
            data += part.read_bytes()
    return data


def _seed(store: Any, user: str, other: str, secret: str, other_secret: str) -> None:
    store.put(
        user_memories(user),
        "m1",
        {"text": f"my locker code is {secret}", "user_id": user, "thread_id": "t-1"},
    )
    store.put(thread_messages("t-1"), "msg1", {"text": f"remember {secret} please", "user_id": user})
    store.put(
        ("_remem", "extraction", "t-1"), "state", {"user_id": user, "watermark": 0, "pending": [secret]}
    )
    store.put(user_memories(other), "m1", {"text": f"my locker code is {other_secret}", "user_id": other})
    store.put(thread_messages("t-2"), "msg1", {"text": f"note {other_secret}", "user_id": other})


def test_forget_user_leaves_no_bytes_in_the_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "erase.db"
    user, other = "user-" + uuid.uuid4().hex, "user-" + uuid.uuid4().hex
    secret, other_secret = _secret(), _secret()
    embedder = CachedEmbedder(FakeEmbedder(32))
    with SqliteStore.from_conn_string(
        path, index={"dims": 32, "embed": embedder, "fields": INDEX_FIELDS}
    ) as store:
        _seed(store, user, other, secret, other_secret)
        for _ in range(3):  # updates leave old versions in free pages and FTS segments unless scrubbed
            store.put(user_memories(user), "m2", {"text": f"again {secret}", "user_id": user})
        assert secret.encode() in _file_bytes(path) or secret.lower().encode() in _file_bytes(path)
        assert store.search(("users", user), query=secret)

        report = forget(store, user_id=user)

        assert report.items == 4 and report.queued == 1 and report.vectors == 3 and report.keyword_rows == 4
        assert report.namespaces == 3 and report.compacted
        assert hybrid_search(store, ("users", user), secret) == []
        assert hybrid_search(store, (), secret, mode="keyword") == []
        assert all(
            text_hash(t) not in embedder._cache for t in (f"my locker code is {secret}", f"again {secret}")
        )
        # the other user is untouched
        assert store.get(user_memories(other), "m1") is not None
        assert store.get(thread_messages("t-2"), "msg1") is not None
        assert store.search(("users", other), query=other_secret)[0].key == "m1"
    data = _file_bytes(path)
    for needle in (secret, secret.lower(), user):
        assert needle.encode() not in data, needle
    assert other_secret.encode() in data or other_secret.lower().encode() in data


def test_forget_thread_takes_its_memories_and_state_only(tmp_path: Path) -> None:
    with SqliteStore.from_conn_string(tmp_path / "t.db") as store:
        store.put(thread_messages("t-1"), "a", {"text": "one", "user_id": "u"})
        store.put(thread_messages("t-10"), "a", {"text": "ten", "user_id": "u"})  # a prefix of t-1's label
        store.put(user_memories("u"), "from-t1", {"text": "x", "thread_id": "t-1"})
        store.put(user_memories("u"), "from-t10", {"text": "y", "thread_id": "t-10"})
        store.put(("_remem", "extraction", "t-1"), "state", {"user_id": "u"})
        report = forget(store, thread_id="t-1")
        assert report.items == 3 and report.queued == 1
        assert sorted(k for _, k in report.item_keys) == ["a", "from-t1", "state"]
        assert store.get(thread_messages("t-10"), "a") is not None
        assert store.get(user_memories("u"), "from-t10") is not None
        assert store.get(user_memories("u"), "from-t1") is None


def test_forget_namespace(tmp_path: Path) -> None:
    with SqliteStore.from_conn_string(tmp_path / "n.db") as store:
        store.put(("a", "b"), "k", {"v": 1})
        store.put(("a", "b", "c"), "k", {"v": 2})
        store.put(("a", "bc"), "k", {"v": 3})
        report = forget(store, namespace="a.b")
        assert report.items == 2
        assert store.list_namespaces() == [("a", "bc")]


@pytest.mark.postgres
def test_forget_user_leaves_no_rows_in_postgres(pg_url: str) -> None:
    _check_postgres(pg_url)


@pytest.mark.pgvector
def test_forget_user_leaves_no_rows_with_pgvector(pgvector_url: str) -> None:
    _check_postgres(pgvector_url)


def _check_postgres(url: str) -> None:
    user, other = "user-" + uuid.uuid4().hex, "user-" + uuid.uuid4().hex
    secret, other_secret = _secret(), _secret()
    with PostgresStore.from_conn_string(
        url, index={"dims": 32, "embed": FakeEmbedder(32), "fields": ["text"]}
    ) as store:
        _seed(store, user, other, secret, other_secret)
        report = forget(store, user_id=user)
        assert report.items == 3 and report.queued == 1 and report.compacted
        assert store.get(user_memories(other), "m1") is not None
    with psycopg.connect(url) as conn:
        for needle, expected in ((secret, 0), (user, 0), (other_secret, 2)):
            like = f"%{needle.lower()}%"
            found = conn.execute(
                "SELECT (SELECT count(*) FROM remem_items WHERE lower(value) LIKE %s)"
                " + (SELECT count(*) FROM remem_ns WHERE lower(path) LIKE %s),"
                " (SELECT count(*) FROM remem_terms WHERE term LIKE %s),"
                " (SELECT count(*) FROM remem_term_docs WHERE terms LIKE %s)",
                [like, like, like, like],
            ).fetchone()
            assert found is not None and found[0] == expected, needle
            if needle != user:  # the keyword index holds the secrets as words (a user id is split in two)
                assert found[1] == found[2] == expected, needle
        vectors = conn.execute("SELECT count(*) FROM remem_vectors").fetchone()
        assert vectors is not None and vectors[0] == 2


def test_forget_user_takes_their_whole_threads_but_not_shared_ones(tmp_path: Path) -> None:
    with SqliteStore.from_conn_string(tmp_path / "own.db") as store:
        # the memory client's layout: the owner is named in the thread's meta item and in its messages
        store.put(("threads", "t-own", "meta"), "thread", {"user_id": "alice"})
        store.put(("threads", "t-own", "order"), "00000000", {"ids": ["m1"]})
        store.put(("threads", "t-own", "messages"), "m1", {"content": "hello", "user_id": "alice"})
        store.put(("threads", "t-shared", "messages"), "a", {"content": "from alice", "user_id": "alice"})
        store.put(("threads", "t-shared", "messages"), "b", {"content": "from bob", "user_id": "bob"})
        store.put(("threads", "t-shared", "order"), "00000000", {"ids": ["a", "b"]})
        store.put(("threads", "t-bob", "meta"), "thread", {"user_id": "bob"})
        report = forget(store, user_id="alice")
        assert report.items == 4
        assert store.list_namespaces(prefix=("threads",)) == [
            ("threads", "t-bob", "meta"),
            ("threads", "t-shared", "messages"),
            ("threads", "t-shared", "order"),
        ]
        assert store.get(("threads", "t-shared", "messages"), "b") is not None
        assert store.get(("threads", "t-shared", "messages"), "a") is None
