"""How checkpoint and task ids are stored: a uuid (what LangGraph writes) in 22 characters, not 36.

An id in the usual uuid form (32 lowercase hex digits in groups of 8-4-4-4-12) is stored as its 128 bits
in base 64, six bits a character from an alphabet in ASCII order, so stored ids sort as the ids do (the
checkpoints' order in ``list()``, ``before``); any other id is stored after :data:`MARK`, a character no
stored uuid has. Every id goes through :func:`stored` on its way into a statement and :func:`shown` on its
way out; nothing else in remem sees the stored form.

Schema v8 turned the ids already stored into this form in SQL (:func:`migration`): SQLite has no function
that makes bytes from hex, so the stored form is text and the conversion string arithmetic. A remem older
than v8 that is still running after the upgrade (it checked the schema when it opened) writes ids as they
are given; :func:`shown` refuses such a row with a ``StorageError`` rather than reading it as another id.

A difference from the stock savers, kept on purpose: a stored uuid's order is the order of the ids in the
uuid form, but any other id (``"checkpoint-1"``, an upper-case uuid) is stored after :data:`MARK` and so
sorts before every lower-case uuid, where the stock savers compare the ids' text (``list()`` gives such a
checkpoint after the uuid ones, newest first; ``before`` counts it older than them).
"""

from __future__ import annotations

import base64
import functools
import re

from remem.errors import StorageError

__all__ = ["MARK", "maybe_shown", "migration", "shown", "stored"]

MARK = "\x01"
"""Leads a stored id that is not in the uuid form (kept as it is after it)."""

_ORDERED = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_STANDARD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_TO_ORDERED = str.maketrans(_STANDARD, _ORDERED)
_TO_STANDARD = str.maketrans(_ORDERED, _STANDARD)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_STORED_UUID = re.compile(r"[-0-9A-Z_a-z]{22}")


@functools.lru_cache(maxsize=8192)  # a checkpoint's id comes back as the next one's parent, page after page
def stored(id_: str) -> str:
    """The stored form of a checkpoint or task id."""
    if len(id_) == 36 and _UUID.fullmatch(id_):
        packed = bytes.fromhex(id_.replace("-", ""))
        return base64.b64encode(packed)[:22].decode().translate(_TO_ORDERED)
    return MARK + id_


@functools.lru_cache(maxsize=8192)
def shown(value: str) -> str:
    """The id a stored form stands for (inverse of :func:`stored`); a value :func:`stored` cannot have
    made (say a 36-character id an older remem wrote after the upgrade) is a ``StorageError``."""
    if value[:1] == MARK:
        return value[1:]
    if _STORED_UUID.fullmatch(value):
        h = base64.b64decode(value.translate(_TO_STANDARD) + "==").hex()
        id_ = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        if stored(id_) == value:  # the last character holds 2 bits: the other 4 are zero
            return id_
    raise StorageError(
        f"a stored checkpoint or task id ({value[:40]!r}) is not in the form checkpoint schema v8 and later "
        "store: a remem older than v8, still running since the upgrade, wrote this row. Stop every older "
        "remem process before upgrading (the README's note on upgrades); this thread's rows written "
        "since then can be removed with delete_thread or restored from a backup"
    )


def maybe_shown(value: str | None) -> str | None:
    return None if value is None else shown(value)


# --- schema v8: the ids stored before, turned into the stored form in SQL ------------------------------

_GLOB = "-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12))
_REGEX = "^" + "-".join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12)) + "$"


def _expression(column: str, dialect: str) -> str:
    """SQL for :func:`stored` of ``column`` (NULL stays NULL): the 32 hex digits and one zero, three digits
    (12 bits) at a time, each two characters of the ordered alphabet."""
    find = "instr" if dialect == "sqlite" else "strpos"
    hexes = f"(replace({column}, '-', '') || '0')"

    def digit(i: int) -> str:
        return f"({find}('0123456789abcdef', substr({hexes}, {i}, 1)) - 1)"

    parts = []
    for group in range(11):
        first = 3 * group + 1
        value = f"({digit(first)} * 256 + {digit(first + 1)} * 16 + {digit(first + 2)})"
        high, low = f"{value} / 64", f"({value} - {value} / 64 * 64)"  # no %: a driver's placeholder
        parts.append(f"substr('{_ORDERED}', {high} + 1, 1) || substr('{_ORDERED}', {low} + 1, 1)")
    is_uuid = f"{column} GLOB '{_GLOB}'" if dialect == "sqlite" else f"{column} ~ '{_REGEX}'"
    mark = "char(1)" if dialect == "sqlite" else "chr(1)"
    return f"CASE WHEN {is_uuid} THEN {' || '.join(parts)} ELSE {mark} || {column} END"


def migration(dialect: str) -> tuple[str, ...]:
    """The statements of schema v8: every stored checkpoint, parent and task id in its stored form."""
    cid, parent, task = (_expression(c, dialect) for c in ("checkpoint_id", "parent_id", "task_id"))
    return (
        f"UPDATE remem_cp_checkpoints SET checkpoint_id = {cid}, parent_id = {parent}",
        f"UPDATE remem_cp_writes SET checkpoint_id = {cid}, task_id = {task}",
    )
