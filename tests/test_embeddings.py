"""Embeddings: the real local ONNX MiniLM (a few tests), the text-hash cache, the seeded fake."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.memory import InMemoryStore

from remem.embeddings import (
    _ENGLISH_WORDS,
    CachedEmbedder,
    Embedder,
    OnnxEmbedder,
    _english_share,
    default_embedder,
    embed_array,
    text_hash,
)
from remem.store import SqliteStore, hybrid_search
from remem.testing import FakeEmbedder


@pytest.fixture(scope="module")
def minilm() -> CachedEmbedder:
    return default_embedder()


def test_minilm_shape_norm_and_meaning(minilm: CachedEmbedder) -> None:
    assert isinstance(minilm, Embedder) and minilm.dims == 384
    vecs = embed_array(
        minilm,
        ["I live in Lisbon.", "My home is in Lisbon, Portugal.", "The recipe needs two eggs."],
    )
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.6 and sims[0, 2] < 0.3  # a paraphrase is close, an unrelated text is not


def test_minilm_batch_matches_single_and_order_is_kept(minilm: CachedEmbedder) -> None:
    inner = minilm.inner
    assert isinstance(inner, OnnxEmbedder)
    texts = [
        "short",
        "a considerably longer sentence about sailing boats on the river",
        "mid length text here",
    ]
    batch = inner.embed_array(texts)
    singles = np.vstack([inner.embed_array([t]) for t in texts])
    # int8 dynamic quantisation scales activations per batch, so batched and single runs differ slightly
    assert np.all(np.sum(batch * singles, axis=1) > 0.98)
    assert inner.embed_documents([]) == []


def test_minilm_in_a_store_finds_the_paraphrase(tmp_path: Path, minilm: CachedEmbedder) -> None:
    with SqliteStore.from_conn_string(
        tmp_path / "m.db", index={"dims": 384, "embed": minilm, "fields": ["text"]}
    ) as s:
        s.put(("users", "u"), "city", {"text": "The user lives in Lisbon."})
        s.put(("users", "u"), "pet", {"text": "The user has a dog called Rex."})
        s.put(("users", "u"), "food", {"text": "The user is allergic to peanuts."})
        assert hybrid_search(s, ("users",), "Which town is their home?", mode="vector")[0].key == "city"
        assert hybrid_search(s, ("users",), "What animal do they own?")[0].key == "pet"


def test_usable_as_langgraph_index_embed(minilm: CachedEmbedder) -> None:
    store = InMemoryStore(index={"dims": 384, "embed": minilm, "fields": ["text"]})
    store.put(("d",), "a", {"text": "green tea in the morning"})
    store.put(("d",), "b", {"text": "a broken bicycle wheel"})
    assert store.search(("d",), query="what do they drink?")[0].key == "a"


def test_cache_embeds_each_distinct_text_once() -> None:
    fake = FakeEmbedder(16)
    cached = CachedEmbedder(fake, max_entries=3)
    first = cached.embed_array(["a", "b", "a", "c"])
    assert fake.texts_embedded == 3 and np.allclose(first[0], first[2])
    cached.embed_array(["b", "c"])
    assert fake.texts_embedded == 3
    cached.embed_array(["d"])  # evicts the least recently used ("a")
    cached.embed_array(["a"])
    assert fake.texts_embedded == 5
    assert cached.evict(["a", "zzz"]) == 1 and text_hash("a") not in cached._cache
    assert cached.embed_query("b") == pytest.approx(fake.embed_query("b"))


def test_fake_embedder_is_seeded_and_deterministic() -> None:
    a, b, c = FakeEmbedder(32, seed=1), FakeEmbedder(32, seed=1), FakeEmbedder(32, seed=2)
    text = "the cat sat on the mat"
    assert a.embed_query(text) == b.embed_query(text)
    assert a.embed_query(text) != c.embed_query(text)
    shared, unrelated = a.embed_array(["the cat sat", "quantum flux capacitor"]) @ np.asarray(
        a.embed_query(text)
    )
    assert shared > unrelated
    assert np.linalg.norm(a.embed_query("")) == pytest.approx(1.0)


def test_plain_function_embedder_is_normalised() -> None:
    out = embed_array(lambda texts: [[3.0, 4.0] for _ in texts], ["x", "y"])
    assert out.tolist() == [[0.6000000238418579, 0.800000011920929]] * 2


# ---------------------------------------------------------------- the default says when texts are not English

ENGLISH_TURNS = [
    "I need a birthday gift idea for a coworker.",
    "The weather has been grey all week, so I stay in.",
]
FRENCH_TURNS = [
    "Je ne peux rien manger qui contienne des kiwis.",
    "Nous partons en Islande pour notre voyage de noces.",
]
CHINESE_TURNS = ["我妹妹上个月终于搬到了杭州。", "早上起来最好的就是一杯绿茶。"]
KOREAN_TURNS = ["아침에 일어나서 마시는 녹차 한 잔이 최고예요.", "제 여동생이 부산에 이사했대요."]


@given(st.lists(st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)), min_size=1))
def test_chinese_characters_count_as_half_words_and_never_as_english(texts: list[str]) -> None:
    share, words = _english_share(texts)
    assert words == sum(len(t) for t in texts) / 2
    assert share == (0.0 if words else 1.0)


@given(
    st.lists(st.sampled_from(sorted(_ENGLISH_WORDS)), min_size=1),
    st.lists(st.sampled_from(["zorbl", "Lyon"])),
)
def test_the_share_is_the_english_words_among_all(english: list[str], other: list[str]) -> None:
    share, words = _english_share([" ".join(english).upper(), ", ".join(other)])
    assert words == len(english) + len(other)
    assert share == pytest.approx(len(english) / words)


@pytest.mark.parametrize(
    ("turns", "warns"),
    [(ENGLISH_TURNS, False), (FRENCH_TURNS, True), (CHINESE_TURNS, True), (KOREAN_TURNS, True)],
    ids=["en", "fr", "zh", "ko"],
)
def test_minilm_warns_once_when_the_texts_it_embeds_are_not_english(
    turns: list[str], warns: bool, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = OnnxEmbedder()
    with caplog.at_level(logging.WARNING, logger="remem.embeddings"):
        embedder.embed_array(turns[:1])  # too few words to decide
        assert not caplog.records
        for _ in range(10):
            embedder.embed_array(turns)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == (1 if warns else 0), said
    assert not warns or ("embedder='e5'" in said[0] and "remem[e5]" in said[0])


def test_another_onnx_model_is_not_checked(caplog: pytest.LogCaptureFixture) -> None:
    from remem.embeddings import _minilm_model_path

    embedder = OnnxEmbedder(_minilm_model_path())  # a model given by path may read any language
    with caplog.at_level(logging.WARNING, logger="remem.embeddings"):
        for _ in range(10):
            embedder.embed_array(CHINESE_TURNS)
    assert not caplog.records


def test_the_warning_is_said_once_per_embedder(caplog: pytest.LogCaptureFixture) -> None:
    # as the README says: each bundled-MiniLM embedder decides for itself (remem's stores share one)
    first, second = OnnxEmbedder(), OnnxEmbedder()
    with caplog.at_level(logging.WARNING, logger="remem.embeddings"):
        for embedder in (first, second, first, second):
            for _ in range(10):
                embedder.embed_array(FRENCH_TURNS)
    assert len([r for r in caplog.records if "embedder='e5'" in r.getMessage()]) == 2
