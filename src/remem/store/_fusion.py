"""How hybrid search puts its keyword and vector hits in one order (pure functions, no I/O).

A hybrid search gathers candidates from both signals (the keyword top ``max(limit, 50)`` and the vector
top ``limit + 8`` or more), gives every candidate both scores (BM25, the same on both backends, 0 where no
query word matches; the cosine similarity, looked up for keyword-only candidates) and orders them by
:func:`fuse`.

The rule (``DEFAULT``): each signal's scores are scaled to [0, 1] within the query's candidates (keyword
by its best score, so a non-match stays 0; vector min-max), each signal is weighted by how sure its first
hit is, and the two are summed::

    keyword confidence = (1 - second_keyword / best_keyword) * min(1, best_keyword / 12)
    vector confidence  = min(1, (best_similarity - second_similarity) / 0.05)
    fused = 0.6 * keyword confidence * keyword / best_keyword
          + 0.4 * vector confidence * (vector - lowest) / (highest - lowest)

The keyword side is trusted as far as its first hit stands out from its second and is a real match (a
BM25 of 12 is several rare words of the question; one common word scores 2-5); the vector side as far as
its first hit leads its second by a clear margin of similarity (a ranking that barely separates its
candidates, as MiniLM on Chinese and Korean, gets almost no say). When neither side leads (both tops tie,
e.g. duplicate turns), keyword order decides and similarity breaks its ties. Equal-weight reciprocal-rank
fusion (``RRF``, the first rule) throws the scores away: a weak ranking pushes the right hit of the strong
one out of the top places. ``LEADS`` is the rule before this one (0.2 / 0.8, both confidences relative
leads, no absolute scale).

How it was chosen (``bench/retrieval.py``: SQLite, raw turns, MiniLM and e5-small, dev sets ``generated``
(English), ``multilingual`` (fr/zh/ko) and BEAM's 100K chats; replayed on each question's candidates).
The criterion is the worst margin, over k = 1, 5, 10, 25 and over the sets, of hybrid recall@k minus the
better of keyword and vector. Grid: keyword weight 0.05 to 0.95 (vector weight 1 - keyword), keyword
confidence the relative lead alone or times min(1, best / scale) for scale 5 to 16, vector confidence
the relative lead, the lead over the 5th, over the mean, or min(1, gap / g) for g 0.02 to 0.1, lead
powers 0.5 to 2, z-score scaling, floors on both confidences, a cut of the keyword side at its top 3 to
20, rank floors. Margins with MiniLM (generated; multilingual; BEAM; worst):

    equal-weight RRF (first rule)               -0.133; -0.227; -0.056; -0.227
    LEADS 0.2 / 0.8, relative leads             -0.015; -0.020; -0.023; -0.023
    z-scores 0.9 / 0.1, keyword lead            -0.055; -0.060; -0.017; -0.060
    0.6 / 0.4, scale 12, gap 0.05 (DEFAULT)     -0.003; -0.007; -0.008; -0.008
    0.5 / 0.5, scale 12, gap 0.08               -0.003; -0.007; -0.011; -0.011
    0.6 / 0.4, scale 16, gap 0.05               -0.003; -0.013; -0.011; -0.013

With e5-small DEFAULT is -0.003 on generated and -0.067 on multilingual, as LEADS (+0.000; -0.067): e5's
vector ranking holds every answer in its top 25 there and no rule of the grid keeps all of them while
taking keyword's first places. No rule of the grid is at or above both parts on every set: the remaining
losses are single questions at k = 1 or 25. With DEFAULT, MiniLM recall@1/5/10/25: generated 0.703 0.961
0.985 1.000 (keyword 0.379 0.518 0.542 0.552, vector 0.706 0.955 0.982 1.000); multilingual 0.573 0.633
0.673 0.767 (keyword 0.560 0.640 0.673 0.773, vector 0.267 0.320 0.353 0.480); BEAM 0.331 0.624 0.720
0.828 (keyword 0.201 0.458 0.576 0.692, vector 0.311 0.607 0.715 0.836).

Leave one set out (``bench/retrieval.py``, ``bench/_loso.py``; MiniLM; five dev sets: the two above,
``eval-generated`` from ``remem eval generate``, REALTALK's real chats and six of BEAM's 100K chats), with
the grid widened by a keyword confidence from the best hit's BM25 alone (``keyword_lead=0``): no rule of
the grid holds hybrid >= the better part at k = 5 and 10 on every left-out set. DEFAULT's worst margin over
the five is -1.9 (REALTALK, where keyword is the stronger part: hybrid r@5 50.4, keyword 52.3); the best
rule without the lead (0.5 / 0.5, scale 24, gap 0.05) is +1.2 on REALTALK and +1.5 to +10.3 on the
generated sets but -6.5 on BEAM (r@5 52.3, vector 57.0: BEAM's long turns give every query a high BM25,
so an absolute scale trusts a weak keyword side there). DEFAULT stays, as the better worst case.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["DEFAULT", "LEADS", "RRF", "FusionRule", "fuse"]

K = TypeVar("K")


@dataclass(frozen=True)
class FusionRule:
    """``method="scores"``: weighted sum of per-query scaled scores, each signal weighted by its confidence
    (see the module docstring); ``"rrf"``: weighted reciprocal ranks, ``weight / (k + rank)`` summed over
    the signals that found the item.

    ``keyword_scale``: the BM25 score from which the keyword side's best hit counts as a full match (0: any
    score does); ``vector_gap``: the similarity by which the vector side's first hit must lead its second to
    be fully trusted (0: its lead relative to the candidates' span instead); ``keyword_lead``: the power of
    the keyword side's relative lead in its confidence (0: the absolute BM25 of its best hit alone, with
    ``keyword_scale``); ``power``: applied to both confidences."""

    method: Literal["scores", "rrf"]
    keyword_weight: float
    vector_weight: float
    power: float = 1.0
    k: int = 60
    keyword_scale: float = 0.0
    vector_gap: float = 0.0
    keyword_lead: float = 1.0

    @property
    def needs_scores(self) -> bool:
        """Whether every candidate needs both scores (keyword-only candidates get their similarity)."""
        return self.method == "scores"


RRF = FusionRule("rrf", 1.0, 1.0)
LEADS = FusionRule("scores", keyword_weight=0.2, vector_weight=0.8, power=1.0)  # the rule before DEFAULT
DEFAULT = FusionRule("scores", keyword_weight=0.6, vector_weight=0.4, keyword_scale=12.0, vector_gap=0.05)


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
    lead_power = rule.keyword_lead if rule.keyword_scale > 0 else 1.0
    keyword_confidence = _lead(keywords, 0.0) ** lead_power if lead_power > 0 else 1.0
    if rule.keyword_scale > 0:
        keyword_confidence *= min(1.0, best / rule.keyword_scale)
    if rule.vector_gap > 0:
        second = similarities[1] if len(similarities) > 1 else low
        vector_confidence = min(1.0, (high - second) / rule.vector_gap) if high > low else 0.0
    else:
        vector_confidence = _lead(similarities, low)
    keyword_weight = rule.keyword_weight * keyword_confidence**rule.power
    vector_weight = rule.vector_weight * vector_confidence**rule.power
    if keyword_weight + vector_weight <= 0:
        # neither side's first hit leads (both tie at the top): keyword order, similarity breaks its ties
        keyword_weight, vector_weight = rule.keyword_weight, rule.vector_weight * 1e-6
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
