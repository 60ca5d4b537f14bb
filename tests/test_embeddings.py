"""Embeddings: the real local ONNX MiniLM (a few tests), the text-hash cache, the seeded fake."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from langgraph.store.memory import InMemoryStore

from remem.embeddings import CachedEmbedder, Embedder, OnnxEmbedder, default_embedder, embed_array, text_hash
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
