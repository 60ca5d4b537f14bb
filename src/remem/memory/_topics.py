"""Topics of a summary, without a model: the most frequent content phrases. Pure and deterministic.

Chit-chat sentences ("Thanks, Caroline!") count for nothing, nor do stop words, greetings and words of
reaction (``remem.messages.words``): a topic says what the conversation is about, not how it is polite.
"""

from __future__ import annotations

import re
from collections import Counter

from remem.messages.words import GREETINGS, PHATIC, STOP_WORDS, is_chit_chat, words

__all__ = ["extract_topics"]

_OWN_STOP_WORDS = """user assistant need want use using used one two new points earlier omitted currently
    truncated like make right"""
_STOP = STOP_WORDS | GREETINGS | PHATIC | frozenset(_OWN_STOP_WORDS.split())
_LABEL = re.compile(r"^\s*(?:[-*•]\s*)?(?:user|assistant)\s*:\s*", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?…])\s+|\n+")


def _words(text: str) -> list[str]:
    """The words of ``text``'s sentences that carry something (chit-chat sentences left out)."""
    out: list[str] = []
    for sentence in _SENTENCE.split(text):
        sentence = _LABEL.sub("", sentence)
        if sentence.strip() and not is_chit_chat(sentence):
            out.extend(w.strip("'-") for w in words(sentence))
            out.append("")  # no phrase across sentences
    return out


def extract_topics(text: str, limit: int = 5) -> tuple[str, ...]:
    """Up to ``limit`` topics: repeated two-word phrases first, then frequent words; ties by first use."""
    found = _words(text)
    first: dict[str, int] = {}
    phrases: Counter[str] = Counter()
    singles: Counter[str] = Counter()
    for i, w in enumerate(found):
        if w in _STOP or len(w) < 3:
            continue
        singles[w] += 1
        first.setdefault(w, i)
        if i + 1 < len(found) and found[i + 1] not in _STOP and len(found[i + 1]) >= 3:
            phrase = f"{w} {found[i + 1]}"
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
