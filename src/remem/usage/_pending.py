"""Paid calls whose ledger row could not be written: kept in the thread's state until the ledger takes them.

A model call that was paid for and whose ledger write then failed must neither lose its reply (a resume
would pay again) nor its row. Both budget checkers (remem's agent, ``BudgetMiddleware``) put the call's
event in the state key :data:`UNRECORDED`, in the same update as the reply, so that the checkpoint that
stores the reply stores the row too; the thread's next model call writes it to the ledger before its
budget check (idempotent: every kept event has a call id) and empties the key. The state holds only the
calls not yet recorded (normally none), never a list that grows with the thread.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from remem.errors import RememError
from remem.usage._base import Ledger
from remem.usage._records import UsageEvent

__all__ = ["UNRECORDED", "flush_unrecorded", "record_or_keep", "unrecorded_of"]

UNRECORDED = "remem_unrecorded"

log = logging.getLogger("remem.usage")

_FIELDS = {f.name for f in dataclasses.fields(UsageEvent)}


def _with_call_id(event: UsageEvent) -> UsageEvent:
    # A kept event may be written twice (by run_turn's check, then by the call): its id makes that one row.
    return event if event.call_id else dataclasses.replace(event, call_id=f"unrecorded:{uuid.uuid4().hex}")


def record_or_keep(ledger: Ledger, event: UsageEvent, hold: str | None = None) -> list[dict[str, Any]]:
    """Record ``event`` (and remove the call's ``hold`` with it); when the ledger refuses, the event as a
    state value to keep with the reply (the hold then expires on its own)."""
    try:
        if hold is None:
            ledger.record(event)
        else:
            ledger.settle(event, hold)
    except RememError as exc:
        log.warning(
            "a paid model call could not be written to the usage ledger (%s); it is kept in the thread's "
            "state with its reply and written by the thread's next model call",
            exc,
        )
        return [dataclasses.asdict(_with_call_id(event))]
    return []


def unrecorded_of(state: Any) -> list[UsageEvent]:
    """The kept events of a state (none when the key is absent or holds something else)."""
    kept = state.get(UNRECORDED) if isinstance(state, Mapping) else None
    if not isinstance(kept, Sequence):
        return []
    return [
        UsageEvent(**{k: v for k, v in row.items() if k in _FIELDS})
        for row in kept
        if isinstance(row, Mapping)
    ]


def flush_unrecorded(ledger: Ledger, state: Any) -> bool:
    """Write the state's kept events to the ledger (a failure raises: nothing has been paid yet);
    True when there were any, so that the caller empties the key with its update."""
    if not isinstance(state, Mapping) or not state.get(UNRECORDED):
        return False  # every call asks: normally nothing is kept
    for event in unrecorded_of(state):
        ledger.record(event)
    return True
