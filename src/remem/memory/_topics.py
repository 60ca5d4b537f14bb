"""Topics of a summary, without a model: the most frequent content phrases. Pure and deterministic."""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["extract_topics"]

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]+")
_STOP_WORDS = """a about above after again against all also am an and any are as at be because been
    before being
    below between both but by can could did do does doing done down during each few for from further
    get got had has have having he her here hers him his how i i'm i've if in into is it it's its just
    let like make me more most my no nor not now of off on once only or other our ours out over own
    please right same she should so some such than that the their them then there these they this
    those through to too under until up us very was we we're were what when where which while who whom
    why will with would you you're your yours user assistant yes okay ok thanks thank sure know want
    need tell said say one two new use using used points earlier omitted really currently
    """
_STOP = frozenset(_STOP_WORDS.split())


def _words(text: str) -> list[str]:
    return [w.lower().strip("'-") for w in _WORD.findall(text)]


def extract_topics(text: str, limit: int = 5) -> tuple[str, ...]:
    """Up to ``limit`` topics: repeated two-word phrases first, then frequent words; ties by first use."""
    words = _words(text)
    first: dict[str, int] = {}
    phrases: Counter[str] = Counter()
    singles: Counter[str] = Counter()
    for i, w in enumerate(words):
        if w in _STOP or len(w) < 3:
            continue
        singles[w] += 1
        first.setdefault(w, i)
        if i + 1 < len(words) and words[i + 1] not in _STOP and len(words[i + 1]) >= 3:
            phrase = f"{w} {words[i + 1]}"
            phrases[phrase] += 1
            first.setdefault(phrase, i)
    ranked = sorted(phrases, key=lambda p: (-phrases[p], first[p]))
    topics: list[str] = []
    used: set[str] = set()
    for p in ranked:
        a, b = p.split(" ")
        if a in used or b in used:
            continue
        topics.append(p)
        used.update((a, b))
        if len(topics) == limit:
            return tuple(topics)
    for w in sorted(singles, key=lambda w: (-singles[w], first[w])):
        if w not in used and singles[w] > 1:
            topics.append(w)
            used.add(w)
            if len(topics) == limit:
                break
    return tuple(topics)
