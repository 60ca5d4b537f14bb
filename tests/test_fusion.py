"""Hybrid search's fusion rule: its invariants, what hits carry, and hybrid never below its best part.

The dev-set tests run the real SqliteStore on fixed slices of the committed dev sets (``bench/data`` and
``remem eval generate``'s) with the default embedder (MiniLM), where hybrid must reach the better of
keyword and vector at k = 5 and 10 (the first ten English conversations: at every k); and the French and
Korean conversations with the seeded fake embedder (keyword search the stronger signal, a vector ranking
that is noise), where a small shortfall is left.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.base import PutOp

from remem.store import SqliteStore, hybrid_search
from remem.store import _core as core
from remem.store import _fusion as fusion
from remem.testing import FakeEmbedder

pytestmark = pytest.mark.xdist_group("fusion")  # the module's dev-set stores are built once, in one worker

DEV = Path(__file__).parent.parent / "bench" / "data" / "retrieval_multilingual.json"
ENGLISH = DEV.with_name("retrieval_dev.json")
KS = (1, 5, 10)

candidate = st.fixed_dictionaries(
    {"keyword": st.floats(0, 30, allow_nan=False), "vector": st.floats(-1, 1, allow_nan=False)}
)


@given(st.dictionaries(st.integers(0, 40), candidate, min_size=1, max_size=30))
def test_fused_values_lie_in_the_weights_range(scores: dict[int, dict[str, float]]) -> None:
    fused = fusion.fuse(scores)
    top = fusion.DEFAULT.keyword_weight + fusion.DEFAULT.vector_weight
    assert set(fused) == set(scores)
    assert all(-1e-9 <= v <= top + 1e-9 for v in fused.values())


@pytest.mark.parametrize("rule", [fusion.DEFAULT, fusion.SCORES], ids=["default", "scores"])
@given(scores=st.dictionaries(st.integers(0, 40), candidate, min_size=2, max_size=30))
def test_an_item_no_worse_on_both_signals_is_fused_no_lower(
    rule: fusion.FusionRule, scores: dict[int, dict[str, float]]
) -> None:
    fused = fusion.fuse(scores, rule)
    for a, sa in scores.items():
        for b, sb in scores.items():
            if sa["keyword"] >= sb["keyword"] and sa["vector"] >= sb["vector"]:
                # the deal places identical candidates one after the other, in the order given
                tied = rule.method == "interleave" and sa == sb
                assert tied or fused[a] >= fused[b] - 1e-9, (a, b)


def _placed(scores: dict[int, dict[str, float]], rule: fusion.FusionRule | None = None) -> list[int]:
    fused = fusion.fuse(scores, rule)
    return sorted(fused, key=lambda i: -fused[i])


def test_the_default_deals_places_from_the_fused_order_and_the_side_that_agrees_or_the_vector_side() -> None:
    # 30 keyword hits (1 the best) and 30 vector hits (101 the best), no item in both top 10s
    scores: dict[int, dict[str, float]] = {
        i: {"keyword": 40.0 - i, "vector": 0.1 - i / 1000} for i in range(1, 31)
    }
    scores |= {i: {"vector": 0.9 - i / 1000} for i in range(101, 131)}
    dealt = _placed(scores)
    by_bm25 = replace(fusion.SCORES, keyword_lead=0.0)  # the fused order where the sides disagree
    assert dealt[0] == _placed(scores, by_bm25)[0]  # the first place is the fused order's
    by_vector = sorted(scores, key=lambda i: -scores[i]["vector"])
    assert dealt[1] == next(i for i in by_vector if i != dealt[0])  # no agreement: the vector side deals

    scores[5]["vector"] = 0.95  # one item in both top 10s is not agreement yet
    assert _placed(scores)[1] == next(i for i in by_vector if i != _placed(scores)[0])
    scores[6]["vector"] = 0.94  # two items in both top 10s: the keyword side deals instead
    dealt, fused = _placed(scores), _placed(scores, fusion.SCORES)
    by_keyword = sorted(
        (i for i in scores if scores[i].get("keyword", 0) > 0), key=lambda i: -scores[i]["keyword"]
    )
    assert dealt[0] == fused[0]
    assert dealt[1] == next(i for i in by_keyword if i != dealt[0])
    for k in (4, 6, 10):  # at depth k: the top k/2 of both orders dealt from
        assert set(by_keyword[: k // 2]) <= set(dealt[:k]) and set(fused[: k // 2]) <= set(dealt[:k])


def test_where_the_sides_disagree_a_strong_keyword_match_keeps_its_place_without_a_lead() -> None:
    # two turns match the question's rare words equally (BM25 20, no lead); the vector side ranks
    # others first and shares none of its top 10 with the keyword side. Trusted by its lead, the keyword
    # side weighs nothing and the fused order is the vector side's; by its BM25 alone it takes the first
    # place (the rule before gave both places to vector hits).
    scores: dict[int, dict[str, float]] = {
        1: {"keyword": 20.0, "vector": 0.30},
        2: {"keyword": 20.0, "vector": 0.29},
    }
    scores |= {i: {"vector": 0.9 - (i - 100) / 100} for i in range(101, 121)}
    assert _placed(scores)[0] == 1
    assert _placed(scores, fusion.AGREE20)[:2] == [101, 102]


def test_rrf_rule_is_reciprocal_rank_fusion() -> None:
    keyword, vector = [3, 1, 2], [2, 4, 3]
    scores: dict[int, dict[str, float]] = {}
    for rank, i in enumerate(keyword, start=1):
        scores.setdefault(i, {})["keyword_rank"] = rank
    for rank, i in enumerate(vector, start=1):
        scores.setdefault(i, {})["vector_rank"] = rank
    assert fusion.fuse(scores, fusion.RRF) == pytest.approx(core.rrf([keyword, vector]))


def test_when_neither_side_leads_keyword_order_decides_and_similarity_breaks_its_ties() -> None:
    # both tops tie (duplicate texts): no confidence either side, yet the order is not arbitrary
    scores = {
        1: {"keyword": 2.0, "vector": 0.9},
        2: {"keyword": 4.0, "vector": 0.5},
        3: {"keyword": 4.0, "vector": 0.6},
        4: {"vector": 0.9},
    }
    fused = fusion.fuse(scores)
    assert sorted(fused, key=lambda i: -fused[i]) == [3, 2, 1, 4]


def test_a_weak_keyword_best_is_trusted_less_than_a_strong_one() -> None:
    # the same lead on keywords: a best BM25 below keyword_scale weighs proportionally less
    def keyword_weight(best: float) -> float:
        # item 1 alone matches and has the lowest similarity, so its fused value is the keyword weight
        scores = {1: {"keyword": best, "vector": 0.1}, 2: {"vector": 0.5}, 3: {"vector": 0.2}}
        return fusion.fuse(scores, fusion.SCORES)[1]

    rule = fusion.SCORES
    assert keyword_weight(rule.keyword_scale / 4) == pytest.approx(rule.keyword_weight / 4)
    assert keyword_weight(rule.keyword_scale * 3) == pytest.approx(rule.keyword_weight)


def test_a_sure_keyword_match_breaks_a_near_tie_of_the_vector_ranking() -> None:
    # one item alone matches the query's words; the vector ranking puts another barely ahead of it
    scores = {1: {"keyword": 6.0, "vector": 0.50}, 2: {"vector": 0.505}, 3: {"vector": 0.40}}
    fused = fusion.fuse(scores)
    assert max(fused, key=lambda i: fused[i]) == 1
    # two items tie on keywords: the keyword side is not trusted, the vector ranking decides
    tied = {1: {"keyword": 6.0, "vector": 0.40}, 2: {"keyword": 6.0, "vector": 0.50}, 3: {"vector": 0.1}}
    fused = fusion.fuse(tied)
    assert max(fused, key=lambda i: fused[i]) == 2


def test_hybrid_hits_keep_per_mode_scores_ranks_and_the_fused_value(tmp_path: Path) -> None:
    index = {"dims": 64, "embed": FakeEmbedder(64), "fields": ["text"]}
    with SqliteStore.from_conn_string(str(tmp_path / "s.db"), index=index) as store:
        store.put(("u",), "tea", {"text": "green tea every morning"})
        store.put(("u",), "cat", {"text": "a cat named Miso"})
        store.put(("u",), "job", {"text": "works as a nurse"})
        hits = hybrid_search(store, ("u",), "green tea", limit=3)
    assert [h.mode for h in hits] == ["hybrid"] * 3
    assert hits[0].key == "tea"
    assert {"keyword", "keyword_rank", "vector", "vector_rank", "fused"} <= set(hits[0].scores)
    assert all("vector" in h.scores and "fused" in h.scores for h in hits)
    fused = [h.scores["fused"] for h in hits]
    assert fused == sorted(fused, reverse=True)
    assert all(h.score == h.scores["vector"] for h in hits)  # the stock meaning of score is kept


def _dev_slice() -> list[dict[str, Any]]:
    data = json.loads(DEV.read_text(encoding="utf-8"))
    return [c for c in data["conversations"] if c["id"][:2] in ("fr", "ko")]


@pytest.fixture(scope="module")
def dev_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    convs = _dev_slice()
    index = {"dims": 384, "embed": FakeEmbedder(384), "fields": ["content"]}
    path = tmp_path_factory.mktemp("fusion") / "dev.db"
    with SqliteStore.from_conn_string(str(path), index=index) as store:
        for conv in convs:
            ns = ("threads", conv["id"], "messages")
            store.batch([PutOp(ns, t["id"], {"content": t["content"]}) for t in conv["turns"]])
        yield store, convs


def _recall(store: Any, convs: list[dict[str, Any]], mode: str) -> list[float]:
    found: list[int | None] = []
    for conv in convs:
        for q in conv["questions"]:
            keys = [h.key for h in hybrid_search(store, ("threads", conv["id"]), q["question"], mode=mode)]  # type: ignore[arg-type]
            found.append(next((r for r, k in enumerate(keys, 1) if k in q["answers"]), None))
    return [sum(1 for r in found if r is not None and r <= k) / len(found) for k in KS]


# How far below the better of keyword and vector hybrid may fall on the fake-embedder slice, whose vector
# ranking is noise: where the two sides share nothing in their top 20 the deal gives every second place to
# the vector side, and keeps the fused order's top k/2 (here keyword's): 0.59 vs keyword 0.63 at @5. The
# target, 0, holds with MiniLM on every committed dev set (the slices below, the multilingual set whole).
SHORTFALL = 0.05


def test_hybrid_stays_within_a_small_shortfall_of_its_best_part_on_the_dev_slice(dev_store: Any) -> None:
    store, convs = dev_store
    keyword, vector = _recall(store, convs, "keyword"), _recall(store, convs, "vector")
    hybrid = _recall(store, convs, "hybrid")
    for k, h, kw, vec in zip(KS, hybrid, keyword, vector, strict=True):
        assert h >= max(kw, vec) - SHORTFALL - 1e-9, (
            f"recall@{k}: hybrid {h:.3f}, keyword {kw:.3f}, vector {vec:.3f}"
        )
    assert sum(len(c["questions"]) for c in convs) >= 50


def test_equal_weight_rrf_falls_below_its_best_part_on_the_same_slice(dev_store: Any) -> None:
    # the same store searching with the rule it had before: the test above would fail for it
    store, convs = dev_store
    keyword, vector = _recall(store, convs, "keyword"), _recall(store, convs, "vector")
    with mock.patch.object(fusion, "DEFAULT", fusion.RRF):
        rrf = _recall(store, convs, "hybrid")
    assert any(r < max(kw, vec) - SHORTFALL for r, kw, vec in zip(rrf, keyword, vector, strict=True)), rrf


@pytest.fixture(scope="module")
def english_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    from remem.embeddings import default_embedder

    convs = json.loads(ENGLISH.read_text(encoding="utf-8"))["conversations"][:10]
    embedder = default_embedder()
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["content"]}
    path = tmp_path_factory.mktemp("fusion") / "english.db"
    with SqliteStore.from_conn_string(str(path), index=index) as store:
        for conv in convs:
            ns = ("threads", conv["id"], "messages")
            store.batch([PutOp(ns, t["id"], {"content": t["content"]}) for t in conv["turns"]])
        yield store, convs


def test_hybrid_is_never_below_its_best_part_on_the_english_slice(english_store: Any) -> None:
    store, convs = english_store
    keyword, vector = _recall(store, convs, "keyword"), _recall(store, convs, "vector")
    hybrid = _recall(store, convs, "hybrid")
    for k, h, kw, vec in zip(KS, hybrid, keyword, vector, strict=True):
        assert h >= max(kw, vec) - 1e-9, f"recall@{k}: hybrid {h:.3f}, keyword {kw:.3f}, vector {vec:.3f}"
    assert sum(len(c["questions"]) for c in convs) >= 100


@pytest.mark.parametrize("rule", [fusion.LEADS, fusion.RRF], ids=["leads", "rrf"])
def test_the_rules_before_fall_below_their_best_part_on_the_english_slice(
    english_store: Any, rule: fusion.FusionRule
) -> None:
    # the test above would fail for the rules the store used before
    store, convs = english_store
    keyword, vector = _recall(store, convs, "keyword"), _recall(store, convs, "vector")
    with mock.patch.object(fusion, "DEFAULT", rule):
        hybrid = _recall(store, convs, "hybrid")
    assert any(h < max(kw, vec) - 1e-9 for h, kw, vec in zip(hybrid, keyword, vector, strict=True)), hybrid


def _eval_slice() -> list[dict[str, Any]]:
    """A fixed slice of the set ``remem eval generate`` makes (seed 21): two conversations per language,
    in the flat layout of the bench's dev sets."""
    from remem.eval import generate

    convs = []
    for conv in generate(seed=21, per_language=2)["conversations"]:
        turns = [t for s in conv["sessions"] for t in s["turns"]]
        questions = [{"question": q["question"], "answers": q["evidence"]} for q in conv["questions"]]
        convs.append({"id": conv["id"], "turns": turns, "questions": [q for q in questions if q["answers"]]})
    return convs


SLICES: dict[str, Any] = {
    "generated": lambda: json.loads(ENGLISH.read_text(encoding="utf-8"))["conversations"][10:16],
    "multilingual": lambda: json.loads(DEV.read_text(encoding="utf-8"))["conversations"],
    "eval-generated": _eval_slice,
}


@pytest.fixture(scope="module")
def minilm() -> Any:
    from remem.embeddings import default_embedder

    return default_embedder()


@pytest.fixture(scope="module")
def slice_recalls(minilm: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(name, rule) -> (keyword, vector, hybrid) recall at KS on that slice, hybrid searching by ``rule``
    (None: the default)."""
    memo: dict[tuple[str, Any], tuple[list[float], ...]] = {}

    def measure(name: str, rule: fusion.FusionRule | None = None) -> tuple[list[float], ...]:
        if (name, rule) not in memo:
            convs = SLICES[name]()
            index = {"dims": minilm.dims, "embed": minilm, "fields": ["content"]}
            path = tmp_path_factory.mktemp("slice") / "dev.db"
            with SqliteStore.from_conn_string(str(path), index=index) as store:
                for conv in convs:
                    ns = ("threads", conv["id"], "messages")
                    store.batch([PutOp(ns, t["id"], {"content": t["content"]}) for t in conv["turns"]])
                assert sum(len(c["questions"]) for c in convs) >= 40
                with mock.patch.object(fusion, "DEFAULT", rule or fusion.DEFAULT):
                    memo[(name, rule)] = tuple(
                        _recall(store, convs, m) for m in ("keyword", "vector", "hybrid")
                    )
        return memo[(name, rule)]

    return measure


@pytest.mark.parametrize("name", sorted(SLICES))
def test_hybrid_reaches_its_best_part_at_5_and_10_on_a_slice_of_every_committed_dev_set(
    name: str, slice_recalls: Any
) -> None:
    # the invariant (bench/retrieval.py's leave-one-set-out table), with the default embedder; BEAM and
    # REALTALK (downloaded, not committed) only in the bench
    keyword, vector, hybrid = slice_recalls(name)
    for k, h, kw, vec in zip(KS, hybrid, keyword, vector, strict=True):
        if k in (5, 10):
            assert h >= max(kw, vec) - 1e-9, f"recall@{k}: hybrid {h:.3f}, keyword {kw:.3f}, vector {vec:.3f}"


def test_the_last_score_rule_falls_below_its_best_part_on_the_multilingual_set(slice_recalls: Any) -> None:
    # the test above would fail for the rule the store used before (SCORES): 0.633 vs keyword 0.640 at @5
    keyword, vector, hybrid = slice_recalls("multilingual", fusion.SCORES)
    assert hybrid[1] < max(keyword[1], vector[1]) - 1e-9, (hybrid, keyword, vector)
