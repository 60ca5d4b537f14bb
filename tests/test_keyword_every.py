"""The keyword index's every-term (AND) query (issue 22, point 1): it ranks exactly the items an exhaustive
ranking does, and its work follows the rarest term's items, not that times the number of terms.

Work is counted, never timed: SQLite's virtual-machine steps (``set_progress_handler``) for the query.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import PutOp

from remem._statements import Statement
from remem.store import PostgresStore, SqliteStore
from remem.store import _keyword as kw

NS = ("docs",)
VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


@pytest.fixture
def store() -> Iterator[SqliteStore]:
    with SqliteStore.from_conn_string(":memory:") as opened:
        yield opened


def _fill(store: SqliteStore, docs: list[list[str]]) -> None:
    store.batch([PutOp(NS, f"d{i}", {"text": " ".join(words)}) for i, words in enumerate(docs)])


def _query(store: Any, sql: str, params: list[Any]) -> list[Any]:
    def program(tx: Any) -> Any:
        rows = yield Statement(sql, params)
        return rows

    return list(store._run(program, write=False))


def _postings(store: Any) -> dict[int, tuple[dict[str, int], int]]:
    """item id -> (term -> tf, dl), read from the index."""
    out: dict[int, tuple[dict[str, int], int]] = {}
    for term, item, tf, dl in _query(store, f"SELECT term, item_id, tf, dl FROM {kw.TERMS}", []):
        out.setdefault(int(item), ({}, int(dl)))[0][str(term)] = int(tf)
    return out


def _every(
    store: Any, weights: dict[str, float], mean: float, lowest: int | None, limit: int
) -> list[tuple[int, float]]:
    sql, params = kw._rank_sql(
        store.dialect, weights, mean, every=True, lowest=lowest, join=False, now=0.0,
        ns_ids=None, item_ids=None, limit=limit,
    )  # fmt: skip
    return [(int(i), float(s)) for i, s in _query(store, sql, params)]


def _exhaustive(
    postings: dict[int, tuple[dict[str, int], int]],
    weights: dict[str, float],
    mean: float,
    lowest: int | None,
) -> list[tuple[int, float]]:
    """BM25 of every item holding every term, best first (ties by item id)."""
    scored = []
    for item, (tfs, dl) in postings.items():
        if (lowest is None or item > lowest) and all(t in tfs for t in weights):
            s = sum(
                w * tfs[t] * (kw.K1 + 1) / (tfs[t] + kw.K1 * (1 - kw.B + kw.B * dl / mean))
                for t, w in weights.items()
            )
            scored.append((item, s))
    return sorted(scored, key=lambda x: (-round(x[1], 9), x[0]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=10), min_size=1, max_size=40),
    # up to every word: more terms than the query looks up (kw.EVERY_LOOKUPS), which its HAVING requires
    query=st.lists(st.sampled_from(VOCAB), min_size=2, max_size=len(VOCAB), unique=True),
    k=st.integers(min_value=1, max_value=12),
    lowest=st.none() | st.integers(min_value=0, max_value=30),
)
def test_the_every_term_query_ranks_what_an_exhaustive_ranking_does(
    docs: list[list[str]], query: list[str], k: int, lowest: int | None
) -> None:
    with SqliteStore.from_conn_string(":memory:") as store:
        _check_against_exhaustive(store, docs, query, k, lowest)


def _check_against_exhaustive(
    store: Any, docs: list[list[str]], query: list[str], k: int, lowest: int | None
) -> None:
    _fill(store, docs)
    postings = _postings(store)
    present = {t for tfs, _ in postings.values() for t in tfs}
    weights = {
        t: kw.idf(len(postings), sum(t in tfs for tfs, _ in postings.values())) for t in query if t in present
    }
    if len(weights) < 2:
        return
    mean = max(sum(dl for _, dl in postings.values()) / len(postings), 1.0)
    expected = _exhaustive(postings, weights, mean, lowest)
    full = _every(store, weights, mean, lowest, 10_000)
    ranked = sorted(full, key=lambda x: (-round(x[1], 9), x[0]))
    assert [i for i, _ in ranked] == [i for i, _ in expected]
    assert [s for _, s in ranked] == pytest.approx([s for _, s in expected])
    assert _every(store, weights, mean, lowest, k) == full[:k]  # the top k are the full ranking's


@pytest.mark.postgres
def test_the_every_term_query_ranks_what_an_exhaustive_ranking_does_on_postgres(pg_url: str) -> None:
    rng = random.Random(11)
    docs = [[rng.choice(VOCAB) for _ in range(rng.randint(1, 10))] for _ in range(120)]
    with PostgresStore.from_conn_string(pg_url) as store:
        _check_against_exhaustive(store, docs, ["alpha", "bravo", "charlie"], 7, None)
        first = min(_postings(store))
        _check_against_exhaustive(store, [], ["delta", "echo"], 5, first + 40)


def _many_words(count: int) -> list[str]:
    return [f"word{i}" for i in range(count)]


def test_a_forty_word_every_term_query_looks_up_only_the_few_rarest_terms(store: SqliteStore) -> None:
    # Each look-up is a semi-join PostgreSQL plans together with the others: with one a term, 18 terms took
    # it 2.6 GB to plan on 10,000 items. The HAVING (the item's matching terms counted) still requires all 40.
    weights = {w: 1.0 + i / 100 for i, w in enumerate(_many_words(40))}
    sql, params = kw._rank_sql(
        store.dialect, weights, 20.0, every=True, lowest=None, join=False, now=0.0,
        ns_ids=None, item_ids=None, limit=10,
    )  # fmt: skip
    assert sql.count("EXISTS") <= 4
    assert sql.count(f"FROM {kw.TERMS}") <= 6  # the ranked rows, the rarest term's items, its look-ups
    assert "HAVING count(*) = ?" in sql and params[-2] == 40


@pytest.mark.postgres
def test_an_eighty_word_every_term_query_runs_on_postgres_within_a_statement_timeout(pg_url: str) -> None:
    # With one semi-join a term, PostgreSQL took over 8 s (and 900 MB) to plan this query, 5 s for 60 words:
    # the server enforces the bound here, set in this test's own transaction.
    rng = random.Random(3)
    words = _many_words(80)
    docs = [[w for w in words if rng.random() < 0.95] for _ in range(150)]
    docs[7] = docs[90] = list(words)  # two items hold every word
    with PostgresStore.from_conn_string(pg_url) as store:
        _fill(store, docs)
        postings = _postings(store)
        weights = {w: kw.idf(len(postings), sum(w in tfs for tfs, _ in postings.values())) for w in words}
        mean = max(sum(dl for _, dl in postings.values()) / len(postings), 1.0)
        sql, params = kw._rank_sql(
            store.dialect, weights, mean, every=True, lowest=None, join=False, now=0.0,
            ns_ids=None, item_ids=None, limit=50,
        )  # fmt: skip
        bounded = "SET LOCAL statement_timeout = '2s'; SET LOCAL work_mem = '4MB'"

        def program(tx: Any) -> Any:
            for setting in bounded.split("; "):
                yield Statement(setting, [], "none")
            shown = yield Statement("SHOW statement_timeout", [])
            rows = yield Statement(sql, params)
            return shown, rows

        shown, rows = store._run(program, write=False)
        assert shown[0][0] == "2s"  # the bound is in force for the query
        found = [(int(i), float(s)) for i, s in rows]
    expected = _exhaustive(postings, weights, mean, None)
    ranked = sorted(found, key=lambda x: (-round(x[1], 9), x[0]))  # ties (equal items) by id, as expected's
    assert [i for i, _ in ranked] == [i for i, _ in expected]
    assert [s for _, s in ranked] == pytest.approx([s for _, s in expected])
    assert len(found) >= 2


def _steps(store: SqliteStore, run: Any) -> int:
    count = [0]

    def step() -> int:
        count[0] += 1
        return 0

    store.conn.set_progress_handler(step, 1)
    try:
        run()
    finally:
        store.conn.set_progress_handler(None, 1)
    return count[0]


def test_the_every_term_query_looks_up_about_one_term_per_item_of_the_rarest(store: SqliteStore) -> None:
    # 3,000 items, each word in about a quarter of them, independently: few items hold all eight.
    rng = random.Random(5)
    words = [f"w{i}" for i in range(8)]
    _fill(store, [[w for w in words if rng.random() < 0.25] or ["filler"] for _ in range(3000)])
    postings = _postings(store)
    df = {w: sum(w in tfs for tfs, _ in postings.values()) for w in words}
    weights = {w: kw.idf(3000, df[w]) for w in words}
    rarest = max(weights, key=lambda t: (weights[t], t))
    single = _steps(store, lambda: _every(store, {rarest: weights[rarest]}, 4.0, None, 50))
    every = _steps(store, lambda: _every(store, weights, 4.0, None, 50))
    # Walking the rarest term's items costs ``single``; looking all eight terms up in each cost about 8x it.
    assert every <= 3 * single, (every, single)
