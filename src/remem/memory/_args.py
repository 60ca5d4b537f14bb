"""Checks of what a caller passes to the memory client, so that a wrong type or value is a remem error
that says what to pass (not a ``TypeError`` from deep inside a plan, or a text read as its characters).

A wrong type is an :class:`~remem.errors.ArgumentTypeError` (also a ``TypeError``); a value out of range
is a :class:`~remem.errors.RememUsageError` (also a ``ValueError``). Pure: no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any, SupportsIndex

from remem.errors import ArgumentTypeError, RememUsageError

__all__ = [
    "check_filter",
    "check_ids",
    "check_int",
    "check_number",
    "check_text",
    "check_types",
    "check_whole",
]


def check_int(value: object, name: str, *, meaning: str = "", example: int = 5) -> int:
    """``value`` as an int; ``meaning`` ("how many records to return") goes in the message. A bool is
    refused (``k=True`` is a slip, not a count), and so are 1.5 and "3"; numpy's ints are taken."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        what = f" ({meaning})" if meaning else ""
        raise ArgumentTypeError(f"{name} takes a whole number{what}, e.g. {name}={example}; got {value!r}")
    return operator.index(value)


def check_whole(value: object, name: str, *, least: int = 0, meaning: str = "", example: int = 5) -> int:
    """``value`` as an int of at least ``least`` (see :func:`check_int`)."""
    number = check_int(value, name, meaning=meaning, example=example)
    if number < least:
        what = f" ({meaning})" if meaning else ""
        raise RememUsageError(f"{name} must be {least} or more{what}; got {number}")
    return number


def check_number(value: object, name: str, *, meaning: str) -> float:
    """``value`` as a float of 0 or more (seconds, a timeout)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentTypeError(f"{name} is {meaning}: a number, e.g. {name}=10; got {value!r}")
    if value < 0:
        raise RememUsageError(f"{name} is {meaning}: 0 or more; got {value!r}")
    return float(value)


def check_text(value: object, name: str, *, optional: bool = False) -> Any:
    """``value`` when it is a str (or None, when ``optional``)."""
    if isinstance(value, str) or (optional and value is None):
        return value
    kind = "a text (str) or None" if optional else "a text (str)"
    raise ArgumentTypeError(f"{name} takes {kind}, e.g. {name}='...'; got {type(value).__name__} {value!r}")


def check_types(types: object) -> list[str] | None:
    """Record types to keep: None (all), one type's name, or a list of names."""
    if types is None:
        return None
    if isinstance(types, str):
        return [types]
    items = list(types) if isinstance(types, Iterable) and not isinstance(types, Mapping) else None
    if items is None or not all(isinstance(t, str) for t in items):
        raise ArgumentTypeError(
            f"types takes a list of record types, e.g. types=['fact', 'message']; got {types!r}"
        )
    return items


def check_ids(ids: object, name: str) -> frozenset[str]:
    """A list of message ids (one id alone would otherwise be read as a list of its characters)."""
    items = None if isinstance(ids, str) or not isinstance(ids, Iterable) else list(ids)
    if items is None or not all(isinstance(i, str) for i in items):
        raise ArgumentTypeError(f"{name} takes a list of message ids, e.g. {name}=['m1', 'm2']; got {ids!r}")
    return frozenset(items)


def check_filter(metadata_filter: object) -> Mapping[str, Any] | None:
    """A metadata filter: None, or a dict of the values records must have."""
    if metadata_filter is None or isinstance(metadata_filter, Mapping):
        return metadata_filter
    raise ArgumentTypeError(
        f"metadata_filter takes a dict of field values, e.g. metadata_filter={{'topic': 'billing'}}; "
        f"got {metadata_filter!r}"
    )
