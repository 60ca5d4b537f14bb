"""Clocks: one format for every timestamp remem stores (so that stored times compare as text), and the
database's own clock, for every time that processes on different machines (or with different clocks)
compare: leases, holds and job claims."""

from __future__ import annotations

import datetime as dt

__all__ = ["database_now", "now_iso"]


def now_iso() -> str:
    """Now, in UTC, as ``2026-11-29T12:00:00Z``."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def database_now(dialect: str) -> str:
    """The database's clock in seconds since the epoch, as an SQL expression (``dialect``: ``"sqlite"`` or
    ``"postgres"``). PostgreSQL's is the server's, the same for every client whatever its own clock says;
    SQLite's is the clock of the machine that holds the file, which every process using it shares."""
    if dialect == "sqlite":
        return "((julianday('now') - 2440587.5) * 86400.0)"
    return "extract(epoch from clock_timestamp())::double precision"
