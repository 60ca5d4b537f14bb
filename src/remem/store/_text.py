"""The keyword index's words: one tokeniser for indexed text and queries, on every backend. No I/O here.

Text is NFKC-normalised (full-width forms become plain), then split into runs of letters and digits:

- Chinese, Japanese and Korean runs (which need not hold spaces between words) give their overlapping
  character bigrams and their single characters: ``东京大学`` -> ``东京 京大 大学 东 京 大 学``. A query
  split the same way finds every text that holds its characters, and texts that hold them side by side
  (its bigrams) rank higher.
- Every other run is case-folded with its accents removed (``Café`` -> ``cafe``), then stemmed with a
  light English stemmer (plurals, ``-ing``, ``-ed``, ``-ly``), so ``cafés`` finds ``café`` and ``cafe``.

The same function builds the index and reads the query, and both stores keep the words in the same
tables (``remem_terms``), so a search gives the same hits on SQLite and PostgreSQL.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter

__all__ = ["STOPWORDS", "index_terms", "query_terms", "words"]

_RUN = re.compile(r"[^\W_]+")
# Han (with extensions and compatibility ideographs), kana, Hangul (syllables and jamo), CJK symbols' letters
_CJK = re.compile(
    "[\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0003134f]+"
)
_STOPWORD_TEXT = (
    "a an and are as at be but by did do does for from had has have how i in is it its me my of on "
    "or our so that the their them there they this to was we were what when where which who why "
    "will with you your yours"
)
MAX_TERM = 64  # characters of a word kept in the index (longer words are cut, on both sides alike)
_VOWEL = re.compile(r"[aeiouy]")


def _fold(word: str) -> str:
    """Lower case without accents: ``Élève`` -> ``eleve`` (letters without an ASCII base are kept)."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _stem(word: str) -> str:
    """A light English stemmer (Porter's step 1, simplified): the same word for plurals and verb forms."""
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ingly", "edly", "ing", "ed", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and _VOWEL.search(word[: -len(suffix)]):
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running -> run, stopped -> stop
            break
    return word


STOPWORDS = frozenset(_stem(w) for w in _STOPWORD_TEXT.split())
"""Query words that say little (stemmed as the index stems them); still indexed, so a query of only these finds them."""


def _cjk_terms(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)] + list(run)


@functools.lru_cache(maxsize=65536)
def _term(word: str) -> str:
    """The indexed form of a run of letters and digits outside CJK scripts (words recur: cached)."""
    return _stem(_fold(word))[:MAX_TERM]


def words(text: str) -> list[str]:
    """Every indexed word of ``text``, in order (repeats kept)."""
    if text.isascii():  # NFKC, accents and CJK scripts need not be looked for
        return [_term(run) for run in _RUN.findall(text)]
    out: list[str] = []
    for run in _RUN.findall(unicodedata.normalize("NFKC", text)):
        if run.isascii():
            out.append(_term(run))
            continue
        start = 0
        for cjk in _CJK.finditer(run):
            if cjk.start() > start:
                out.append(_term(run[start : cjk.start()]))
            out.extend(_cjk_terms(cjk.group()))
            start = cjk.end()
        if start < len(run):
            out.append(_term(run[start:]))
    return [w for w in out if w]


def index_terms(text: str) -> Counter[str]:
    """The words of an item's keyword text with their counts (what ``remem_terms`` holds for it)."""
    return Counter(words(text))


def query_terms(query: str, limit: int = 64) -> list[str]:
    """Distinct words of a query, stop words dropped (all kept if nothing else is left)."""
    found = list(dict.fromkeys(words(query)))[:limit]
    kept = [w for w in found if w not in STOPWORDS]
    return kept or found
