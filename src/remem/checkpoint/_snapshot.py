"""A ``DeltaChannel``'s snapshot (LangGraph's ``_DeltaSnapshot``) stored as the list it holds.

LangGraph writes a ``_DeltaSnapshot(messages)`` every ``snapshot_frequency`` updates of the channel; as one
value it would be stored whole each time (every message again, 500 turns: 1.9 MB against 1.2 MB for a
plain graph). Stored as a one-key dict holding the list (the codec's dict descriptor), its messages are
the items the writes that added them stored already: a snapshot costs a list of item numbers.

``_DeltaSnapshot`` is a private name of ``langgraph-checkpoint`` (DeltaChannel is beta), and remem allows
any 4.x: a release without it still imports remem. Its snapshots then take the plain path (the
serializer stores them whole), and a snapshot stored the compact way before says how to read it.
"""

from __future__ import annotations

from typing import Any

from remem.errors import StorageError

try:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
except ImportError:  # pragma: no cover - tested in a process that hides the name
    SNAPSHOT: type[Any] | None = None
else:
    SNAPSHOT = _DeltaSnapshot
"""LangGraph's snapshot type; None when the installed ``langgraph-checkpoint`` has none."""

__all__ = ["KEY", "SNAPSHOT", "of_stored", "to_store"]

KEY = "__remem_delta_snapshot__"
"""The one key of the dict a snapshot is stored as (no graph's value is a dict with only this key)."""


def to_store(value: Any) -> dict[str, list[Any]] | None:
    """The dict a snapshot of a list is stored as; None for any other value."""
    if SNAPSHOT is not None and type(value) is SNAPSHOT and type(value.value) is list:
        return {KEY: value.value}
    return None


def of_stored(value: dict[str, Any]) -> Any:
    """The snapshot a stored dict stands for, or the dict itself."""
    if len(value) == 1 and KEY in value:
        if SNAPSHOT is None:
            raise StorageError(
                "this thread holds a DeltaChannel snapshot that the installed langgraph-checkpoint cannot "
                "rebuild (it has no _DeltaSnapshot); install the version in remem's constraints.txt "
                "(pip install 'langgraph-checkpoint>=4.3,<4.4') to read it"
            )
        return SNAPSHOT(value[KEY])
    return value
