"""libpq's protocol trace of a psycopg connection, for tests that count what PostgreSQL work costs in
messages and round trips, never in time (the checkpointer's and the usage ledger's round-trip tests)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import pq

__all__ = ["Trace", "round_trips", "traced"]


def round_trips(sent: list[str]) -> int:
    """Waits for the server among the frontend messages ``sent``: a simple Query, a Flush (a pipeline
    wanting rows), a lone Sync (the end of an extended-protocol message that no Flush follows)."""
    follows = [*sent[1:], ""]
    return sum(
        m in ("Query", "Flush") or (m == "Sync" and nxt != "Flush")
        for m, nxt in zip(sent, follows, strict=True)
    )


class Trace(list[str]):
    """The names of the frontend messages a connection sent, in order (``Query``, ``Parse``, ``Bind``,
    ``Execute``, ``Sync``, ``Flush``...), with the trace's whole ``lines`` (statements included)."""

    lines: list[str]

    @property
    def round_trips(self) -> int:
        return round_trips(self)

    @property
    def writes(self) -> int:
        """Transactions that wrote: each ends with a COMMIT, or is one write statement in autocommit."""
        writes, open_ = 0, False
        for line in self.lines:
            if not line.startswith("F\t") or line.split("\t")[2] not in ("Query", "Parse"):
                continue
            if "BEGIN" in line:
                open_ = True
            if "COMMIT" in line:
                writes, open_ = writes + 1, False
            elif not open_ and ("INSERT" in line or "DELETE" in line):
                writes += 1
        return writes


@contextmanager
def traced(conn: Any) -> Iterator[Trace]:
    """What ``conn`` (a psycopg connection) sends inside the block, filled in when the block ends."""
    trace = Trace()
    trace.lines = []
    with tempfile.TemporaryFile("w+") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield trace
        finally:
            conn.pgconn.untrace()
            out.seek(0)
            trace.lines = out.read().splitlines()
            trace.extend(line.split("\t")[2].strip() for line in trace.lines if line.startswith("F\t"))
