"""Time words in a question: the dates it is about, relative to the thread's latest message. Pure.

"When did I start?", "last May", "in 2022", "on 8 May 2023", "two weeks ago", "before the trip" (and their
French forms: "quand", "en mai dernier", "il y a deux semaines", "avant le voyage"). :func:`time_query`
reads them into a :class:`TimeQuery`: a range of instants (``start`` inclusive, ``end`` exclusive; either
may be open), the words that name those dates in the index (``8 May 2023`` is indexed with each message,
see ``_records.index_context``), whether the question asks *when*, and the event a "before/after the ..."
is relative to (found by a search, then turned into a range by :func:`around_event`).

"now" is the thread's latest message time, not the clock: a conversation imported from 2023 asks
"last May" about 2023.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from remem.memory._records import MONTHS
from remem.messages.words import content_words

__all__ = ["TimeQuery", "around_event", "needs_now", "time_query"]

_MONTH_WORDS: dict[str, int] = {}
for _n, _name in enumerate(MONTHS, start=1):
    _MONTH_WORDS[_name.lower()] = _n
    _MONTH_WORDS[_name.lower()[:3]] = _n
_MONTH_WORDS["sept"] = 9
_FRENCH_MONTHS = "janvier février mars avril mai juin juillet août septembre octobre novembre décembre"
for _n, _name in enumerate(_FRENCH_MONTHS.split(), start=1):
    _MONTH_WORDS[_name] = _n
_MONTH_WORDS.update({"fevrier": 2, "aout": 8, "decembre": 12})
_MONTH = "|".join(sorted(_MONTH_WORDS, key=len, reverse=True))
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10}
_NUMBERS |= {"un": 1, "une": 1, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "dix": 10}
_UNITS = {
    "day": "day", "days": "day", "jour": "day", "jours": "day",
    "week": "week", "weeks": "week", "semaine": "week", "semaines": "week",
    "month": "month", "months": "month", "mois": "month",
    "year": "year", "years": "year", "an": "year", "ans": "year", "année": "year", "années": "year",
}  # fmt: skip
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))
_COUNT = r"\d+|" + "|".join(sorted(_NUMBERS, key=len, reverse=True))

_WHEN = re.compile(
    r"\b(?:when|what (?:date|day|time|year|month)|how long ago|since when|quand|depuis quand|quelle date)\b",
    re.IGNORECASE,
)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th|er)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(?:of\s+)?(\d{{4}})\b", re.I)
_LAST_MONTH_NAME = re.compile(
    rf"\b(?:last|past|previous)\s+({_MONTH})\b|\b({_MONTH})\s+(?:dernier|passé)\b|\b(?:in|en|au mois de)\s+({_MONTH})\b",
    re.I,
)
_YEAR = re.compile(r"\b(?:in|en|during|since|depuis|of|year|année)\s+((?:19|20)\d{2})\b", re.I)
_RELATIVE = re.compile(
    r"\b(yesterday|hier|today|aujourd'hui|"
    r"(?:last|this|past|previous)\s+(?:week|month|year|weekend)|"
    r"(?:la semaine|le mois|l'année|l'an|le week-end)\s+(?:dernière|dernier|passée|passé)|"
    r"cette (?:semaine|année)|ce mois)\b",
    re.I,
)
_AGO = re.compile(rf"\b({_COUNT})\s+({_UNIT})\s+ago\b|\bil y a\s+({_COUNT})\s+({_UNIT})\b", re.I)
_EVENT = re.compile(
    r"\b(before|after|avant|après)\s+(?:the|my|our|his|her|their|that|le|la|l'|les|mon|ma|notre|ce|cette)\s*(.+)$",
    re.I,
)


@dataclass(frozen=True)
class TimeQuery:
    """What a question says about time. ``start``/``end``: the instants it is about (None: open);
    ``terms``: the words that name those dates in the index; ``asks_when``: it asks for a date;
    ``event``/``relation``: "before/after the <event>", to be placed by a search; ``subject``: the
    question less those words."""

    start: dt.datetime | None = None
    end: dt.datetime | None = None
    terms: tuple[str, ...] = ()
    asks_when: bool = False
    event: str = ""
    relation: str = ""
    subject: str = ""
    """The question without its time words (what to search for; the range says when)."""

    @property
    def has_range(self) -> bool:
        return self.start is not None or self.end is not None

    def contains(self, when: dt.datetime | None) -> bool:
        """Whether ``when`` falls in the range (False for an unknown time)."""
        if when is None or not self.has_range:
            return False
        return (self.start is None or when >= self.start) and (self.end is None or when < self.end)


def _day(year: int, month: int, day: int) -> dt.datetime | None:
    try:
        return dt.datetime(year, month, day, tzinfo=dt.UTC)
    except ValueError:
        return None


def _month_range(year: int, month: int) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(year, month, 1, tzinfo=dt.UTC)
    end = dt.datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=dt.UTC)
    return start, end


def _month_name(month: int) -> str:
    return MONTHS[month - 1]


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS.get(word.lower(), 1)


def _minus(now: dt.datetime, n: int, unit: str) -> tuple[dt.datetime, dt.datetime]:
    """The ``unit`` that was ``n`` units before ``now`` (a day, a week, a month or a year), as a range."""
    today = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC)
    if unit == "day":
        start = today - dt.timedelta(days=n)
        return start, start + dt.timedelta(days=1)
    if unit == "week":
        monday = today - dt.timedelta(days=today.weekday())
        start = monday - dt.timedelta(weeks=n)
        return start, start + dt.timedelta(weeks=1)
    if unit == "month":
        index = now.year * 12 + now.month - 1 - n
        return _month_range(index // 12, index % 12 + 1)
    year = now.year - n
    return dt.datetime(year, 1, 1, tzinfo=dt.UTC), dt.datetime(year + 1, 1, 1, tzinfo=dt.UTC)


def _relative(phrase: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    p = phrase.lower()
    if p in ("yesterday", "hier"):
        return _minus(now, 1, "day")
    if p in ("today", "aujourd'hui"):
        return _minus(now, 0, "day")
    this = p.startswith(("this", "cette", "ce "))
    unit = "year"
    for word, name in (("week", "week"), ("semaine", "week"), ("month", "month"), ("mois", "month")):
        if word in p:
            unit = name
    return _minus(now, 0 if this else 1, unit)


def _range_terms(start: dt.datetime, end: dt.datetime) -> tuple[str, ...]:
    """Words of the indexed dates in ``[start, end)``: a day's "8 May 2023", a month's "May 2023", a year."""
    days = (end - start).days
    if days <= 1:
        return (str(start.day), _month_name(start.month), str(start.year))
    if days <= 31 and start.month == (end - dt.timedelta(seconds=1)).month:
        return (_month_name(start.month), str(start.year))
    if start.year == (end - dt.timedelta(seconds=1)).year:
        if days <= 7:
            return (_month_name(start.month), str(start.year))
        return (str(start.year),)
    return ()


def time_query(question: str, now: dt.datetime | None) -> TimeQuery:
    """Read the time words of ``question`` (see the module's docstring); ``now``: the thread's latest
    message time (None: dates that need it are left open)."""
    asks_when = bool(_WHEN.search(question))
    found = _absolute(question) or (_relative_range(question, now) if now is not None else None)
    if found is not None:
        start, end, (a, b) = found
        subject = _tidy(question[:a] + " " + question[b:])
        return TimeQuery(start, end, _range_terms(start, end), asks_when, subject=subject)
    if match := _EVENT.search(question):
        event = " ".join(content_words(match.group(2).rstrip("?!. ")))
        if event:
            relation = "before" if match.group(1).lower() in ("before", "avant") else "after"
            subject = _tidy(question[: match.start()])
            return TimeQuery(asks_when=asks_when, event=event, relation=relation, subject=subject)
    return TimeQuery(asks_when=asks_when, subject=question)


def _tidy(text: str) -> str:
    return " ".join(text.split()).strip(" ,;")


def needs_now(question: str) -> bool:
    """Whether ``question`` names a date relative to now ("last May", "two weeks ago", "yesterday")."""
    if _absolute(question) is not None:
        return False
    return any(p.search(question) for p in (_AGO, _RELATIVE, _LAST_MONTH_NAME))


_Found = tuple[dt.datetime, dt.datetime, tuple[int, int]]  # the range, and where the question says it


def _absolute(question: str) -> _Found | None:
    for pattern, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        if match := pattern.search(question):
            parts = dict(zip(order, match.groups(), strict=True))
            day = _day(int(parts["y"]), _MONTH_WORDS[parts["m"].lower()], int(parts["d"]))
            if day is not None:
                return day, day + dt.timedelta(days=1), match.span()
    if match := _ISO_DAY.search(question):
        day = _day(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        if day is not None:
            return day, day + dt.timedelta(days=1), match.span()
    if match := _MONTH_YEAR.search(question):
        return (*_month_range(int(match.group(2)), _MONTH_WORDS[match.group(1).lower()]), match.span())
    return None


def _relative_range(question: str, now: dt.datetime) -> _Found | None:
    if match := _AGO.search(question):
        count, unit = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        return (*_minus(now, _count(count), _UNITS[unit.lower()]), match.span())
    if match := _RELATIVE.search(question):
        return (*_relative(match.group(1), now), match.span())
    if match := _LAST_MONTH_NAME.search(question):
        name = next(g for g in match.groups() if g)
        month = _MONTH_WORDS[name.lower()]
        strict = not re.match(r"(?i)in|en|au", match.group(0))  # "last May": not this month's May
        year = now.year if (month < now.month or (month == now.month and not strict)) else now.year - 1
        return (*_month_range(year, month), match.span())
    if match := _YEAR.search(question):
        year = int(match.group(1))
        return (
            dt.datetime(year, 1, 1, tzinfo=dt.UTC),
            dt.datetime(year + 1, 1, 1, tzinfo=dt.UTC),
            match.span(),
        )
    return None


def around_event(query: TimeQuery, when: dt.datetime) -> TimeQuery:
    """``query`` with the range its "before/after the <event>" gives, the event having been said ``when``."""
    if query.relation == "before":
        return TimeQuery(end=when, asks_when=query.asks_when, subject=query.subject)
    return TimeQuery(start=when, asks_when=query.asks_when, subject=query.subject)
