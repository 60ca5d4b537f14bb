"""Relative dates of a turn ("yesterday", "last Friday", "3 days ago") resolved against its session's date,
as bench/retrieval.py measures them (``--indexings speaker+date+relative``): the resolved dates added to
the keyword-only ``context`` of the memory client's message item.

Measured with MiniLM on the dev sets (2026-12-04): REALTALK keyword recall@5 57.3 without, 57.1 with (one
question lost; 159 of its 8,944 turns hold such a phrase, 14 of its 679 questions name a date), the
generated set 51.8 / 51.5, the others unchanged. It does not help, so remem does not do it; it stays here
to be measured again on new sets.
"""

from __future__ import annotations

import datetime as dt
import re

from remem.memory._records import MONTHS, parse_timestamp

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_RELATIVE = re.compile(
    r"\b(?:(?P<day>yesterday|tomorrow|the day before yesterday)"
    rf"|last (?P<last>night|week|weekend|month|year|{'|'.join(_WEEKDAYS)})"
    rf"|(?P<n>\d{{1,2}}|{'|'.join(_COUNTS)}) (?P<unit>days?|weeks?) ago)\b",
    re.IGNORECASE,
)


def relative_dates(text: str, timestamp: str) -> list[str]:
    """The dates that English relative expressions of ``text`` ("yesterday", "last Friday", "last month",
    "3 days ago") name, resolved against when it was said: ``7 May 2023``, ``April 2023``, ``2022``; none
    when the timestamp is unreadable. What a question that names the date ("what happened on 7 May?")
    can then find by keyword."""
    when = parse_timestamp(timestamp)
    if when is None or not text:
        return []
    out: list[str] = []
    for m in _RELATIVE.finditer(text[:4000]):
        days: int | None = None
        if day := m["day"]:
            days = {"yesterday": 1, "tomorrow": -1}.get(day.lower(), 2)
        elif last := m["last"]:
            last = last.lower()
            if last == "month":
                month = (when.month - 2) % 12 + 1
                out.append(f"{MONTHS[month - 1]} {when.year - (when.month == 1)}")
            elif last == "year":
                out.append(str(when.year - 1))
            elif last in _WEEKDAYS:
                days = (when.weekday() - _WEEKDAYS.index(last) - 1) % 7 + 1
            else:  # night: the day before; week, weekend: seven days before
                days = 1 if last == "night" else 7
        else:
            n = int(m["n"]) if m["n"].isdigit() else _COUNTS[m["n"].lower()]
            days = n * (7 if m["unit"].lower().startswith("week") else 1)
        if days is not None:
            then = when - dt.timedelta(days=days)
            out.append(f"{then.day} {MONTHS[then.month - 1]} {then.year}")
    return out
