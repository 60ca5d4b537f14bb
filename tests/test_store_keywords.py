"""Keyword search in Chinese, Japanese, Korean and French, the same on SQLite and PostgreSQL, and the
migration that re-indexes a database written with the previous keyword index (schema version 2)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langgraph.store.base import PutOp

from remem.store import PostgresStore, SqliteStore, hybrid_search
from remem.store import _core as core
from remem.store import _schema as schema
from remem.store._text import index_terms, words
from tests import matrix

NS = ("users", "u1", "memories")

TEXTS = {
    "zh": "我住在北京，每天早上喝一杯绿茶。",
    "zh2": "上海的夏天很热，冬天不太冷。",
    "ja": "東京の桜はとても綺麗です。",
    "ja2": "週末は京都でお寺を見に行きました。",
    "ko": "저는 서울에서 김치를 만들어요.",
    "ko2": "부산 바다는 정말 아름다워요.",
    "fr": "J'ai bu un café à la gare avant le départ.",
    "fr2": "L'hôpital est fermé le dimanche; l'élève attend.",
    "en": "The cafeteria serves green tea and coffee.",
}

# (query, the item it must find first)
QUERIES = [
    ("北京", "zh"),
    ("绿茶", "zh"),
    ("上海的夏天", "zh2"),
    ("桜", "ja"),
    ("東京", "ja"),
    ("京都のお寺", "ja2"),
    ("서울", "ko"),
    ("김치", "ko"),
    ("부산 바다", "ko2"),
    ("café", "fr"),
    ("cafe", "fr"),
    ("CAFÉ gare", "fr"),
    ("hopital", "fr2"),
    ("élève", "fr2"),
    ("eleve dimanche", "fr2"),
    ("départ", "fr"),
]


@pytest.fixture(params=matrix.backend_params("sqlite", "postgres"))
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Opens stores on a SQLite file or on the machine's PostgreSQL (``open_store(**kwargs)``)."""
    stack = contextlib.ExitStack()

    def make(**kwargs: Any) -> Any:
        if request.param == "sqlite":
            return stack.enter_context(SqliteStore.from_conn_string(tmp_path / "kw.db", **kwargs))
        return stack.enter_context(
            PostgresStore.from_conn_string(request.getfixturevalue("pg_url"), **kwargs)
        )

    with stack:
        yield make


def _fill(store: Any) -> None:
    for key, text in TEXTS.items():
        store.put(NS, key, {"text": text})


@pytest.mark.parametrize(("query", "expected"), QUERIES)
def test_cjk_and_french_queries_find_their_sentence_first(open_store: Any, query: str, expected: str) -> None:
    store = open_store()
    _fill(store)
    hits = hybrid_search(store, ("users",), query, mode="keyword", limit=3)
    assert hits and hits[0].key == expected, [(h.key, h.score) for h in hits]


def test_a_query_in_another_script_finds_nothing_it_does_not_hold(open_store: Any) -> None:
    store = open_store()
    _fill(store)
    assert hybrid_search(store, NS, "大阪", mode="keyword") == []  # neither 大 nor 阪 is stored
    assert [h.key for h in hybrid_search(store, NS, "cafeteria", mode="keyword")] == ["en"]


def test_a_line_break_or_tab_in_an_indexed_dict_or_list_keeps_its_words(open_store: Any) -> None:
    # LangGraph gives a path to a dict or a list as JSON, where a line break is the two characters \n.
    store = open_store()
    value = {"notes": {"a": "first line\nsecond", "b": ["x\ty"]}, "other": "zzz"}
    store.put(NS, "k", value, index=["notes"])

    def found(word: str) -> list[str]:
        return [h.key for h in hybrid_search(store, NS, word, mode="keyword")]

    assert found("second") == found("y") == ["k"]
    assert found("nsecond") == found("ty") == found("zzz") == []  # no escape letter; only the field indexed
    # A text that holds JSON is read as written: its backslash and n are the user's characters.
    store.put(NS, "j", {"payload": '{"cmd": "ls\\nrm"}'}, index=["payload"])
    store.put(NS, "all", {"payload": '{"cmd": "ls\\nrm"}'})
    assert sorted(found("nrm")) == ["all", "j"]
    deep: dict[str, Any] = {"text": "deep\ndown"}
    for _ in range(400):  # nested deeper than a recursive walk with a frame per call could go
        deep = {"a": deep}
    store.put(NS, "deep", deep)
    assert found("down") == ["deep"]


@pytest.mark.postgres
def test_sqlite_and_postgres_give_the_same_hits_in_the_same_order(tmp_path: Path, pg_url: str) -> None:
    queries = [q for q, _ in QUERIES] + ["天", "le", "the tea", "열", "お"]
    with (
        SqliteStore.from_conn_string(tmp_path / "same.db") as lite,
        PostgresStore.from_conn_string(pg_url) as pg,
    ):
        _fill(lite)
        _fill(pg)
        for query in queries:
            a = [
                (h.key, round(h.score or 0, 9))
                for h in hybrid_search(lite, ("users",), query, mode="keyword")
            ]
            b = [
                (h.key, round(h.score or 0, 9)) for h in hybrid_search(pg, ("users",), query, mode="keyword")
            ]
            assert a == b, query


_ALPHABET = st.sampled_from(
    list("abcdeéèêàçôùïœ ")
    + list("ÉÀ  ")
    + list("北京东绿茶上海天")
    + list("桜東のはです")
    + list("서울김치에요")
    + list("0123456789")
    + list(" ,.;:!?'-\n")
)
_TEXT = st.text(_ALPHABET, min_size=1, max_size=60)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_word_taken_from_a_stored_text_always_finds_that_text(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Property: for any texts stored, any whitespace-separated word of one of them finds it by keyword."""
    if backend == "sqlite":
        opened: Any = SqliteStore.from_conn_string(tmp_path / "prop.db")
    else:
        opened = PostgresStore.from_conn_string(request.getfixturevalue("pg_url"))
    runs = [0]
    with opened as store:

        @settings(
            max_examples=60 if backend == "sqlite" else 25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(
            texts=st.lists(_TEXT, min_size=1, max_size=6), pick=st.integers(0, 1000), at=st.integers(0, 1000)
        )
        @example(texts=["\n0"], pick=0, at=0)  # a line break: \n in the JSON, which once read as "n0"
        def check(texts: list[str], pick: int, at: int) -> None:
            runs[0] += 1
            ns = ("prop", str(runs[0]))
            for i, text in enumerate(texts):
                store.put(ns, f"t{i}", {"text": text})
            chosen = pick % len(texts)
            candidates = [w for w in texts[chosen].split() if words(w)]
            if not candidates:
                return
            word = candidates[at % len(candidates)]
            hits = hybrid_search(store, ns, word, mode="keyword", limit=len(texts))
            assert f"t{chosen}" in [h.key for h in hits], (word, texts)

        check()
    assert runs[0] > 0


# ---------------------------------------------------------------- migration from schema version 2


def _schema_2(dialect: str, url: str) -> None:
    """A database as schema version 2 left it (FTS5 / tsvector keyword index), with items in four scripts."""
    if dialect == "sqlite":
        conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        ph = "?"
    else:
        conn = psycopg.connect(url, autocommit=True)
        ph = "%s"
    try:
        conn.execute(
            "CREATE TABLE remem_schema (component TEXT NOT NULL, version INTEGER NOT NULL, "
            "applied_at REAL NOT NULL, PRIMARY KEY (component, version))"
        )
        for version, statements in enumerate(schema.COMPONENT.migrations(dialect)[:2], start=1):  # type: ignore[arg-type]
            for text in statements:
                conn.execute(text)
            conn.execute(f"INSERT INTO remem_schema VALUES ('store', {version}, 0)")
        conn.execute(f"INSERT INTO remem_ns (path, depth) VALUES ({ph}, 3)", ["users.u1.memories"])
        for n, (key, text) in enumerate(TEXTS.items(), start=1):
            value = '{"text": "' + text.replace("'", "\\u0027") + '"}'
            if dialect == "sqlite":
                conn.execute(
                    "INSERT INTO remem_items (id, ns_id, key, value, created_at, updated_at) VALUES (?, 1, ?, ?, 0, 0)",
                    [n, key, value],
                )
                conn.execute("INSERT INTO remem_fts (rowid, text) VALUES (?, ?)", [n, text])
            else:
                conn.execute(
                    "INSERT INTO remem_items (id, ns_id, key, value, doc, tsv, created_at, updated_at) "
                    "VALUES (%s, 1, %s, %s, %s::jsonb, to_tsvector('english', %s), 0, 0)",
                    [n, key, value, value, text],
                )
        if dialect == "postgres":  # ids were given: the sequences move on past them, as inserts would
            conn.execute("SELECT setval('remem_items_id_seq', 100), setval('remem_ns_id_seq', 100)")
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_schema_2_database_is_reindexed_by_migration_3(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'old.db'}" if dialect == "sqlite" else str(request.getfixturevalue("pg_url"))
    )
    _schema_2(dialect, url)
    opener: Any = SqliteStore if dialect == "sqlite" else PostgresStore
    with opener.from_conn_string(url) as store:
        for query, expected in QUERIES:
            hits = hybrid_search(store, ("users",), query, mode="keyword", limit=3)
            assert hits and hits[0].key == expected, query
        store.put(NS, "new", {"text": "新しい桜"})
        assert {h.key for h in hybrid_search(store, NS, "桜", mode="keyword")} == {"ja", "new"}
    with opener.from_conn_string(url) as store:  # opened again: nothing left to re-index, nothing lost
        assert len(hybrid_search(store, NS, "café", mode="keyword")) == 1
    if dialect == "sqlite":
        conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"))
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        versions = [r[0] for r in conn.execute("SELECT version FROM remem_schema ORDER BY version")]
    else:
        conn = psycopg.connect(url)
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        versions = [r[0] for r in conn.execute("SELECT version FROM remem_schema ORDER BY version")]
    conn.close()
    assert versions[:3] == [1, 2, 3]
    assert "remem_reindex" not in tables and "remem_fts" not in tables and "remem_terms" in tables


# ---------------------------------------------------------------- rewrites keep the index exact

_WORDS = st.sampled_from(["tea", "river", "garden", "bread", "cat", "Porto", "miso", "dawn"])
_REWRITE = st.tuples(st.integers(0, 3), st.lists(_WORDS, max_size=6).map(" ".join), st.booleans())


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_keyword_rows_after_any_rewrites_are_those_of_the_final_texts(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Property: a put replaces only the words an item lost and rewrites those it kept (single puts fold
    the old words' read into the upsert on Postgres); whatever the order of rewrites, single or batched,
    the index holds exactly the final texts' (word, count, length) rows."""
    if backend == "sqlite":
        opened: Any = SqliteStore.from_conn_string(tmp_path / "rewrite.db")
    else:
        opened = PostgresStore.from_conn_string(request.getfixturevalue("pg_url"))
    runs = [0]
    with opened as store:

        @settings(
            max_examples=60 if backend == "sqlite" else 25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(st.lists(_REWRITE, min_size=1, max_size=12))
        def check(rewrites: list[tuple[int, str, bool]]) -> None:
            runs[0] += 1
            ns = ("rewrite", str(runs[0]))
            final: dict[str, str] = {}
            for n, text, batched in rewrites:
                key = f"k{n}"
                if batched:  # the batch path, with a second item so that it is not a single put
                    store.batch([PutOp(ns, key, {"text": text}), PutOp(ns, "other", {"text": "dawn"})])
                    final["other"] = "dawn"
                else:
                    store.put(ns, key, {"text": text})
                final[key] = text
            rows = store.conn.execute(
                "SELECT i.key, t.term, t.tf, t.dl FROM remem_terms t JOIN remem_items i ON i.id = t.item_id "
                "JOIN remem_ns n ON n.id = i.ns_id WHERE n.path = " + ("?" if backend == "sqlite" else "%s"),
                [".".join(ns)],
            ).fetchall()
            expected = set()
            for key, text in final.items():
                terms = dict(index_terms(core.keyword_text({"text": text}, [])))
                expected |= {(key, t, n, sum(terms.values())) for t, n in terms.items()}
            assert {tuple(r) for r in rows} == expected

        check()
    assert runs[0] > 0


class _Counting:
    """The fake embedder, recording every text it embeds."""

    def __init__(self) -> None:
        from remem.testing import FakeEmbedder

        self.inner, self.texts = FakeEmbedder(32), list[str]()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.texts.append(text)
        return self.inner.embed_query(text)


@pytest.mark.parametrize("where", ["put", "index"])
def test_a_keyword_only_field_is_searchable_by_its_words_and_gets_no_vector(
    open_store: Any, where: str
) -> None:
    from remem.store import keyword_only

    embedder = _Counting()
    fields = ["content", keyword_only("context")]
    index = {"dims": 32, "embed": embedder, "fields": fields if where == "index" else ["content"]}
    store = open_store(index=index)
    value = {"content": "we hiked up the ridge at dawn", "context": "Caroline, 8 May 2023"}
    store.put(NS, "m1", value, **({"index": fields} if where == "put" else {}))
    store.put(NS, "m2", {"content": "Caroline baked bread", "context": "Melanie, 9 May 2023"})
    assert "Caroline, 8 May 2023" not in embedder.texts  # embedded: the content alone
    assert "we hiked up the ridge at dawn" in embedder.texts
    assert [h.key for h in hybrid_search(store, NS, "8 May", mode="keyword")][:1] == ["m1"]
    assert {h.key for h in hybrid_search(store, NS, "Caroline", mode="keyword")} == {"m1", "m2"}
    # the item's vector score is its content's similarity, not its context's (which would be 1 here)
    query = "Caroline, 8 May 2023"
    a, b = np.array(embedder.inner.embed_query(query)), np.array(embedder.inner.embed_query(value["content"]))
    cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    def similarity() -> float:
        return next(h.score for h in hybrid_search(store, NS, query, mode="vector") if h.key == "m1")

    assert similarity() == pytest.approx(cosine, abs=1e-5) and cosine < 0.9
    store.put(
        NS, "m1", value, index=["content", "context"]
    )  # embedded as before: the context is embedded too
    assert similarity() == pytest.approx(1.0, abs=1e-5)
    store.put(NS, "m1", value, index=fields)  # and again keyword-only: its context vector is gone
    assert similarity() == pytest.approx(cosine, abs=1e-5)
    assert [h.key for h in hybrid_search(store, NS, "8 May", mode="keyword")][:1] == ["m1"]
