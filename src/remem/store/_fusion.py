"""How hybrid search puts its keyword and vector hits in one order (pure functions, no I/O).

A hybrid search gathers candidates from both signals (the keyword top ``max(limit, 50)`` and the vector
top ``limit + 8`` or more), gives every candidate both scores (bm25 or ts_rank, 0 where no query word
matches; the cosine similarity, looked up for keyword-only candidates) and orders them by :func:`fuse`.

The rule (``DEFAULT``): each signal's scores are scaled to [0, 1] within the query's candidates (keyword
by its best score, so a non-match stays 0; vector min-max), the keyword side is trusted as far as its
first hit stands out from its second, and the two are weighted and summed::

    confidence = 1 - second_keyword / best_keyword          # 1 when one item alone matches, 0 on a tie
    fused = keyword_weight * confidence * keyword / best_keyword
          + vector_weight * (vector - lowest) / (highest - lowest)

Scaling within the query makes the rule independent of the score's units (SQLite's bm25, Postgres's
ts_rank, any distance), so one pair of weights serves both backends. Equal-weight reciprocal-rank fusion
(``RRF``, the rule before) throws the scores away: a keyword hit that matches every rare word of the
question and a vector hit that is barely more similar than the rest count the same, so a weak ranking
pushes the right hit of the strong one out of the top places.

How the weights were chosen (``python bench/retrieval.py --quick``: SQLite, raw turns, dev sets
``generated`` and ``multilingual``, MiniLM; keyword search with the one BM25 index of ``_keyword`` and the
CJK bigrams of ``_text``): a grid of keyword weight 0 to 1 by 0.05 (vector weight 1 - keyword), lead
``power`` 0 (no lead weighting), 0.5 and 1, weighted RRF 0.1 to 0.9, and equal-weight RRF. The criterion
is the worst margin, over k = 1, 5, 10, 25 and over the sets, of hybrid recall@k minus the better of
keyword and vector (generated; multilingual; worst):

    equal-weight RRF (before)           -0.133; -0.227; -0.227
    scores 0.5 / 0.5, power 0           -0.109; -0.133; -0.133
    scores 0.15 / 0.85, power 0.5       +0.000; -0.040; -0.040
    scores 0.2 / 0.8, power 1           -0.015; -0.020; -0.020   <- DEFAULT (best worst case)
    scores 0.3 / 0.7, power 0.5         -0.018; -0.027; -0.027

No rule of the grid is at or above both parts everywhere: where the vector ranking is weak (MiniLM on
Chinese and Korean) the keyword side must win, and where keywords tie (English paraphrases) the vector
side must; the lead weighting is what lets one rule do both. With DEFAULT, MiniLM recall@1/5/10/25:
generated 0.691 0.945 0.991 1.000 (keyword 0.379 0.518 0.542 0.552, vector 0.706 0.955 0.982 1.000, RRF
0.573 0.915 0.991 1.000); multilingual 0.560 0.620 0.680 0.760 (keyword 0.560 0.640 0.673 0.773, vector
0.267 0.320 0.353 0.480, RRF 0.340 0.413 0.507 0.620).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["DEFAULT", "RRF", "FusionRule", "fuse"]

K = TypeVar("K")


@dataclass(frozen=True)
class FusionRule:
    """``method="scores"``: weighted sum of per-query scaled scores; ``"rrf"``: weighted reciprocal ranks,
    ``weight / (k + rank)`` summed over the signals that found the item."""

    method: Literal["scores", "rrf"]
    keyword_weight: float
    vector_weight: float
    power: float = 0.5
    k: int = 60

    @property
    def needs_scores(self) -> bool:
        """Whether every candidate needs both scores (keyword-only candidates get their similarity)."""
        return self.method == "scores"


RRF = FusionRule("rrf", 1.0, 1.0)
DEFAULT = FusionRule("scores", keyword_weight=0.2, vector_weight=0.8, power=1.0)


def fuse(scores: Mapping[K, Mapping[str, float]], rule: FusionRule | None = None) -> dict[K, float]:
    """The fused value of each candidate (higher first) from its per-signal ``scores``: ``keyword`` and
    ``vector`` scores, ``keyword_rank`` and ``vector_rank`` where that signal found it. ``rule`` None:
    ``DEFAULT`` as it is at call time."""
    rule = rule or DEFAULT
    if rule.method == "rrf":
        return {
            item: sum(
                weight / (rule.k + s[rank])
                for weight, rank in (
                    (rule.keyword_weight, "keyword_rank"),
                    (rule.vector_weight, "vector_rank"),
                )
                if rank in s
            )
            for item, s in scores.items()
        }
    keywords = sorted((max(s.get("keyword", 0.0), 0.0) for s in scores.values()), reverse=True)
    best = keywords[0] if keywords else 0.0
    similarities = sorted((s["vector"] for s in scores.values() if "vector" in s), reverse=True)
    high, low = (similarities[0], similarities[-1]) if similarities else (0.0, 0.0)
    keyword_weight = rule.keyword_weight * _lead(keywords, 0.0) ** rule.power
    vector_weight = rule.vector_weight * _lead(similarities, low) ** rule.power
    fused: dict[K, float] = {}
    for item, s in scores.items():
        keyword = max(s.get("keyword", 0.0), 0.0) / best if best > 0 else 0.0
        vector = (s["vector"] - low) / (high - low) if "vector" in s and high > low else 0.0
        fused[item] = keyword_weight * keyword + vector_weight * vector
    return fused


def _lead(descending: list[float], low: float) -> float:
    """How far the first score stands ahead of the second, in [0, 1] of the span from ``low`` to the first:
    1 when one candidate alone scores (or the rest are all at ``low``), 0 on a tie at the top."""
    if not descending or descending[0] <= low:
        return 0.0
    second = descending[1] if len(descending) > 1 else low
    return (descending[0] - second) / (descending[0] - low)
