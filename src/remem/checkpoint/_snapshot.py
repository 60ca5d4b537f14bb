"""A ``DeltaChannel``'s snapshot (LangGraph's ``_DeltaSnapshot``) stored as the list it holds.

LangGraph writes a ``_DeltaSnapshot(messages)`` every ``snapshot_frequency`` updates of the channel; as one
value it would be stored whole each time (every message again, 500 turns: 1.9 MB against 1.2 MB for a
plain graph). Stored as a one-key dict holding the list (the codec's dict descriptor), its messages are
the items the writes that added them stored already: a snapshot costs a list of item numbers.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.serde.types import _DeltaSnapshot

__all__ = ["KEY", "of_stored", "to_store"]

KEY = "__remem_delta_snapshot__"
"""The one key of the dict a snapshot is stored as (no graph's value is a dict with only this key)."""


def to_store(value: Any) -> dict[str, list[Any]] | None:
    """The dict a snapshot of a list is stored as; None for any other value."""
    if type(value) is _DeltaSnapshot and type(value.value) is list:
        return {KEY: value.value}
    return None


def of_stored(value: dict[str, Any]) -> Any:
    """The snapshot a stored dict stands for, or the dict itself."""
    if len(value) == 1 and KEY in value:
        return _DeltaSnapshot(value[KEY])
    return value
