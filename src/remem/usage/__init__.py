"""A usage ledger for every model call (chat, summariser, extractor, embedder), prices and budgets.

    from remem.usage import open_ledger, Meter, PriceTable, Budgets
    with open_ledger("sqlite:///.remem/remem.db") as ledger:      # the thread's own database
        meter = Meter(ledger, PriceTable.from_settings_rows(settings.prices))
        meter.record("chat", "gpt-4o-mini", input_tokens=812, output_tokens=95, thread_id="t1", turn=3)
        ledger.totals(by="model", since=time.time() - 7 * 86400)

One row per call in the ``remem_usage`` table (schema through :mod:`remem._migrate`), in SQLite or
PostgreSQL; nothing grows in the graph state. :mod:`remem.middleware.budget` enforces the budgets.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from remem._url import parse_database_url
from remem.usage._base import Ledger
from remem.usage._records import KINDS, SOURCES, Kind, Source, Totals, UsageEvent, day_of
from remem.usage._sql import BY, USAGE_TABLE
from remem.usage.budgets import SCOPES, Budgets, Scope, check
from remem.usage.meter import Meter
from remem.usage.prices import Price, PriceTable

__all__ = [
    "BY",
    "KINDS",
    "SCOPES",
    "SOURCES",
    "USAGE_TABLE",
    "Budgets",
    "Kind",
    "Ledger",
    "Meter",
    "Price",
    "PriceTable",
    "Scope",
    "Source",
    "Totals",
    "UsageEvent",
    "check",
    "day_of",
    "ledger_from_url",
    "open_ledger",
    "read_ledger",
]


def ledger_from_url(url: str | Path) -> Ledger:
    """A ledger on ``memory://`` (this process only), ``sqlite:///PATH`` or ``postgresql://...``, set up;
    the caller closes it (or use :func:`open_ledger`)."""
    parsed = parse_database_url(url)
    if parsed.kind == "postgres":
        from remem.usage.postgres import PostgresLedger

        return PostgresLedger.open(parsed.target)
    from remem.usage.sqlite import SqliteLedger

    return SqliteLedger.open(":memory:" if parsed.kind == "memory" else parsed.target)


@contextmanager
def open_ledger(url: str | Path) -> Iterator[Ledger]:
    """:func:`ledger_from_url`, closed on exit."""
    ledger = ledger_from_url(url)
    try:
        yield ledger
    finally:
        ledger.close()


@contextmanager
def read_ledger(url: str | Path) -> Iterator[Ledger | None]:
    """The ledger at ``url`` opened read-only (nothing created); None when the database holds no ledger.

    A missing SQLite file raises :class:`~remem.errors.NotFoundError`.
    """
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        yield None
        return
    if parsed.kind == "postgres":
        from remem.usage.postgres import PostgresLedger

        opened: Ledger | None = PostgresLedger.open_read_only(parsed.target)
    else:
        from remem.usage.sqlite import SqliteLedger

        opened = SqliteLedger.open_read_only(parsed.target)
    try:
        yield opened
    finally:
        if opened is not None:
            opened.close()
