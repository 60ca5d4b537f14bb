"""Searches under a namespace prefix only see that prefix, even when far better matches live elsewhere.

The stores restrict candidates by namespace before ranking (not after), so these tests put many strong
matches outside the searched namespace and check that the few weak ones inside it are all found, in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langgraph.store.base import PutOp

from remem.store._vectors import VectorMatrix
from remem.testing import FakeEmbedder

INDEX = {"dims": 32, "fields": ["text"]}


def _fill(store: Any) -> None:
    crowd = [
        PutOp(("users", f"other{i % 7}", "memories"), f"o{i}", {"text": "green tea green tea green tea"})
        for i in range(400)
    ]
    store.batch(crowd)
    # a sibling whose path starts with the same characters must not leak into ("users", "u1")
    store.put(("users", "u10", "memories"), "sibling", {"text": "green tea"})
    store.put(
        ("users", "u1", "memories"), "weak", {"text": "a long note that mentions tea once among many words"}
    )
    store.put(("users", "u1", "memories"), "strong", {"text": "green tea every morning"})
    store.put(("users", "u1", "notes"), "deeper", {"text": "tea"})


@pytest.mark.parametrize("mode", ["keyword", "hybrid", "vector"])
def test_prefix_search_finds_only_and_all_its_items(make_store: Any, mode: str) -> None:
    index = None if mode == "keyword" else {**INDEX, "embed": FakeEmbedder(32, seed=3)}
    store = make_store(index=index, search_mode=mode)
    _fill(store)
    memories = store.search(("users", "u1", "memories"), query="green tea", limit=10)
    assert {h.key for h in memories} == {"weak", "strong"}
    whole_user = store.search(("users", "u1"), query="green tea", limit=10)
    assert {h.key for h in whole_user} == {"weak", "strong", "deeper"}
    order = [h.scores["fused"] if mode == "hybrid" else h.score for h in whole_user]
    assert order == sorted(order, reverse=True)  # hybrid: fused order; its scores are similarities
    assert {h.key for h in store.search(("users",), query="green tea", limit=500)} >= {"sibling", "strong"}


def test_keyword_ranking_inside_a_namespace_matches_ranking_of_everything(make_store: Any) -> None:
    store = make_store(search_mode="keyword")
    _fill(store)
    inside = store.search(("users", "u1", "memories"), query="green tea", limit=10)
    everything = store.search((), query="green tea", limit=1000)
    order = [h.key for h in everything if h.namespace == ("users", "u1", "memories")]
    assert [h.key for h in inside] == order == ["strong", "weak"]
    assert inside[0].score > inside[1].score > 0


@pytest.mark.parametrize("crowd", [0, 200])  # the namespace holds every item, then a small share of them
def test_expired_items_are_skipped_before_the_limit(make_store: Any, crowd: int) -> None:
    now = [1_800_000_000.0]
    store = make_store(search_mode="keyword", clock=lambda: now[0], ttl={"omit_expired": True})
    store.batch([PutOp(("threads", "t2", "messages"), f"c{i}", {"text": "dinner"}) for i in range(crowd)])
    ns = ("threads", "t1", "messages")
    store.batch([PutOp(ns, f"old{i}", {"text": "lunch plans lunch"}, ttl=1) for i in range(30)])
    store.put(ns, "kept", {"text": "lunch"})
    assert len(store.search(ns, query="lunch", limit=50)) == 31
    now[0] += 61  # the 30 better matches expire (ttl in minutes)
    assert [h.key for h in store.search(ns, query="lunch", limit=5)] == ["kept"]


def test_vector_namespace_index_agrees_with_masking_the_whole_matrix() -> None:
    rng = np.random.default_rng(4)
    vecs = rng.standard_normal((6000, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    items = np.arange(6000, dtype=np.int64)
    ns = rng.integers(0, 200, size=6000).astype(np.int64)
    for exact_below in (20_000, 500):  # exact scan, then the sign-bit prefilter
        matrix = VectorMatrix(16, exact_below=exact_below)
        matrix.add(items[:4000], ns[:4000], vecs[:4000])
        matrix.add(items[4000:], ns[4000:], vecs[4000:])
        matrix.remove(range(0, 6000, 5))
        query = vecs[7]
        few = [3, 150, 3, 77]
        # more than 64 namespaces take the masking path; namespaces with no rows change nothing
        many = [*few, *range(1000, 1100)]
        got = matrix.search(query, 10, ns_ids=few)
        assert got == matrix.search(query, 10, ns_ids=many)
        assert len(got) == 10 and all(int(ns[i]) in few and i % 5 for i, _ in got)
        one = matrix.search(query, 5, ns_ids=[150], item_ids=[int(i) for i in items if ns[i] == 150][:40])
        assert one == matrix.search(query, 5, ns_ids=[*range(1000, 1100), 150], item_ids=[i for i, _ in one])
        assert matrix.search(query, 5, ns_ids=[999]) == []
        matrix.add(
            np.array([9999]), np.array([999]), query[None, :]
        )  # a namespace's rows grow after a search
        assert matrix.search(query, 5, ns_ids=[999]) == [(9999, pytest.approx(1.0, abs=1e-5))]
