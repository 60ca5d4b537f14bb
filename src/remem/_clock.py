"""One clock format for every timestamp remem stores, so that stored times compare as text."""

from __future__ import annotations

import datetime as dt

__all__ = ["now_iso"]


def now_iso() -> str:
    """Now, in UTC, as ``2026-11-29T12:00:00Z``."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
