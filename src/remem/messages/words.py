"""Words that carry no fact: stop words, greetings and courtesies, in English and French. Pure.

One list, used wherever remem weighs words without a model: the memory client drops these words from a
search query (a greeting or a "what" weighs nothing), the extractive summariser and the topics of a
summary leave out chit-chat ("Thanks, Caroline!", "Hey, how are you?").

- :data:`STOP_WORDS`: function words (articles, pronouns, auxiliaries, prepositions, question words);
- :data:`GREETINGS`: greetings, thanks, goodbyes and their courtesies ("hi", "thanks", "merci", "salut");
- :data:`PHATIC`: words of reaction that say nothing by themselves ("great", "wow", "awesome", "génial").

"may" and "like" are left out of the stop words (a month, a preference), and French words that are
also English words ("car", "son", "ton", "ma", "mon", "fait") out of the French ones. Words are compared lower-cased, with their accents (French "été" stays "été"); an apostrophe's elision
("l'", "j'", "qu'") is split off first. Add a language by adding its words to these sets.
"""

from __future__ import annotations

import re

__all__ = [
    "GREETINGS",
    "PHATIC",
    "STOP_WORDS",
    "content_words",
    "is_chit_chat",
    "query_text",
    "words",
]

_ENGLISH_STOP = """a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't could couldn't did didn't do does doesn't doing don't
    done down during each either else ever every few for from further get gets getting got had hadn't has
    hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
    i'd i'll i'm i've if in into is isn't it it'd it'll it's its itself just let let's ll me might
    more most much must mustn't my myself neither no nor not now of off on once one only or other ought our
    ours ourselves out over own quite rather re really same shall shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those though through to too under until up upon us ve very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's whether which while
    who who's whom whose why why's will with won't would wouldn't yet you you'd you'll you're you've your
    yours yourself yourselves"""
_FRENCH_STOP = """a à ai aie aient ais ait alors as au aucun aussi autre aux avaient avais avait avant avec
    avez aviez avions avoir avons ayant c ça ce ceci cela celle celles celui ces cet cette ceux chaque
    ci comme comment d dans de des du donc dont elle elles en encore es est et étaient étais était étant
    été êtes étiez étions être eu eux il ils j je jusqu l la le les leur leurs lui m mais
    me même mes moi n ne ni nos notre nous on ont ou où par parce pas peu peut peux plus pour pourquoi
    qu quand que quel quelle quelles quels qui quoi s sa sans se ses si sien sont sous suis sur t ta
    te tes toi tous tout toute toutes très tu un une vos votre vous y"""
_GREETINGS = """hi hello hey hiya howdy yo greetings thanks thank thx ty cheers
    bye goodbye goodnight welcome please sorry ok okay okey alright yeah yep yes nope sure np
    bonjour bonsoir salut coucou merci mercis revoir bientôt bienvenue pardon désolé désolée stp svp
    oui ouais non d'accord"""
_PHATIC = """great awesome amazing cool nice wow lovely wonderful fantastic fab glad happy haha lol hmm
    oh ah aw awww gosh sounds sound good fine interesting exciting congrats congratulations totally
    absolutely definitely indeed agree appreciate appreciated tell say said know knew think guess
    love hope hoping care means mean keep going sharing share lot lots such thing things stuff
    génial super cool chouette bravo félicitations parfait bien bon bonne ravi ravie vraiment"""

STOP_WORDS = frozenset((_ENGLISH_STOP + " " + _FRENCH_STOP).split())
GREETINGS = frozenset(_GREETINGS.split())
PHATIC = frozenset(_PHATIC.split())
_EMPTY = STOP_WORDS | GREETINGS | PHATIC

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_ELISION = re.compile(r"^(?:[cdjlmnst]|qu|jusqu|lorsqu|puisqu)['’]", re.IGNORECASE)


def _split(text: str) -> list[str]:
    """The words of ``text`` as written; a French elision (``l'``, ``j'``, ``qu'``) split off."""
    found: list[str] = _WORD.findall(text)
    if "'" not in text and "’" not in text:
        return found  # an elision needs its apostrophe
    out: list[str] = []
    for raw in found:
        elided = _ELISION.match(raw)
        if elided and elided.end() < len(raw):
            out.append(raw[: elided.end() - 1])
            raw = raw[elided.end() :]
        out.append(raw)
    return out


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased; a French elision (``l'``, ``j'``, ``qu'``) is split off as
    its own word, and a curly apostrophe reads as a straight one."""
    if "’" not in text:
        return [w.lower() for w in _split(text)]
    return [w.lower().replace("’", "'") for w in _split(text)]


def _weighs(word: str) -> bool:
    low = word.lower().replace("’", "'")
    return low not in STOP_WORDS and low not in GREETINGS


def content_words(text: str) -> list[str]:
    """The words of ``text`` that are neither stop words nor greetings, lower-cased (in their order)."""
    return [w for w in words(text) if _weighs(w)]


_SENTENCE = re.compile(r"(?<=[.!?…])\s+|\n+")


def query_text(text: str) -> str:
    """``text`` as a search query: its sentences that are only chit-chat (:func:`is_chit_chat`: "Hi
    Caroline!", "Thanks!") left out, and greetings taken out of the others; "" when nothing is left (the
    query says nothing to search for). Stop words stay in: the keyword index drops them itself, and
    the embedder reads a question better whole (measured on the generated dev set with MiniLM: vector
    recall@5 fell from 1.00 to 0.93, hybrid from 0.94 to 0.88, with the stop words taken out)."""
    kept: list[str] = []
    for sentence in _SENTENCE.split(text):
        if not sentence.strip() or is_chit_chat(sentence):
            continue
        words_of = [w for w in _split(sentence) if w.lower().replace("’", "'") not in GREETINGS]
        if len(words_of) == len(_split(sentence)):
            kept.append(sentence.strip())
        elif words_of:
            kept.append(" ".join(words_of))
    return " ".join(kept)


def is_chit_chat(text: str) -> bool:
    """Whether ``text`` says nothing but greetings, thanks and reactions: every word is a stop word, a
    greeting or a reaction word, but at most one (a name, as in "Thanks, Caroline!") when it greets."""
    found = words(text)
    if not found:
        return True
    rest = [w for w in found if w not in _EMPTY]
    if not rest:
        return True
    greets = any(w in GREETINGS for w in found)
    return greets and len(rest) == 1 and not any(ch.isdigit() for ch in rest[0])
