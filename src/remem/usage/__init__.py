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

from typing import TYPE_CHECKING

from remem import _lazy

if TYPE_CHECKING:
    from remem.usage._approval import APPROVAL_KIND, Estimate, pending_approval
    from remem.usage._base import LazyLedger, Ledger
    from remem.usage._open import (
        ledger_for,
        ledger_from_url,
        open_ledger,
        read_ledger,
        read_ledger_of,
        usage_meter,
    )
    from remem.usage._records import KINDS, SOURCES, Kind, Source, Totals, UsageEvent, day_of
    from remem.usage._sql import BY, USAGE_TABLE, UsageForgetting, forget_usage
    from remem.usage.budgets import BUDGETS_KEY, SCOPES, Budgets, Scope, check
    from remem.usage.meter import Meter
    from remem.usage.prices import Price, PriceTable
    from remem.usage.recorder import UsageRecorder

# Names are imported on first use (PEP 562): ``import remem.usage.ratelimit`` (which the models layer
# needs) runs this file first, and must not load the ledger, its SQL and the lease machinery with it.
_SOURCES: dict[str, tuple[str, ...]] = {
    "remem.usage._approval": ("APPROVAL_KIND", "Estimate", "pending_approval"),
    "remem.usage._base": ("LazyLedger", "Ledger"),
    "remem.usage._open": (
        "ledger_for",
        "ledger_from_url",
        "open_ledger",
        "read_ledger",
        "read_ledger_of",
        "usage_meter",
    ),
    "remem.usage._records": ("KINDS", "SOURCES", "Kind", "Source", "Totals", "UsageEvent", "day_of"),
    "remem.usage._sql": ("BY", "USAGE_TABLE", "UsageForgetting", "forget_usage"),
    "remem.usage.budgets": ("BUDGETS_KEY", "SCOPES", "Budgets", "Scope", "check"),
    "remem.usage.meter": ("Meter",),
    "remem.usage.recorder": ("UsageRecorder",),
    "remem.usage.prices": ("Price", "PriceTable"),
}
__getattr__, __dir__ = _lazy.exports(__name__, _SOURCES, globals())


__all__ = [
    "APPROVAL_KIND",
    "BUDGETS_KEY",
    "BY",
    "KINDS",
    "SCOPES",
    "SOURCES",
    "USAGE_TABLE",
    "Budgets",
    "Estimate",
    "Kind",
    "LazyLedger",
    "Ledger",
    "Meter",
    "Price",
    "PriceTable",
    "Scope",
    "Source",
    "Totals",
    "UsageEvent",
    "UsageForgetting",
    "UsageRecorder",
    "check",
    "day_of",
    "forget_usage",
    "ledger_for",
    "ledger_from_url",
    "open_ledger",
    "pending_approval",
    "read_ledger",
    "read_ledger_of",
    "usage_meter",
]
