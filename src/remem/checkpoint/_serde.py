"""The serializer remem's savers use by default: LangGraph's JsonPlusSerializer, never pickling, reviving
the user's data classes without opening the door to arbitrary deserialization.

Stock savers default to a permissive msgpack mode: a stored ``(module, name, args)`` imports ``module`` and
calls ``name(args)``, whatever they are (a "will be blocked" warning aside). That is how Pydantic models,
dataclasses and enums in graph state come back as their classes on ``InMemorySaver``, and also how a
tampered database runs code. remem revives, besides LangGraph's safe types and those named in
``allowed_types`` (or passed by LangGraph's ``with_allowlist``), a class only when:

- its module is already imported (reading never imports anything), and
- it is a data class: a Pydantic model, a dataclass, an ``Enum`` or a ``NamedTuple``.

A graph's state classes are imported by the code that runs the graph, so they come back as classes
wherever stock savers bring them back; any other stored callable stays data (LangGraph's "Blocked
deserialization" path). With ``LANGGRAPH_STRICT_MSGPACK=true`` only LangGraph's own allowlist applies.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Iterable

from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _create_msgpack_ext_hook

__all__ = ["RememSerializer", "is_data_class"]


def is_data_class(module: str, name: str) -> bool:
    """Whether ``module.name`` is an already imported Pydantic model, dataclass, Enum or NamedTuple."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    if not isinstance(cls, type):
        return False
    if dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum):
        return True
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a NamedTuple
        return True
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and issubclass(cls, pydantic.BaseModel):
        return True
    v1 = sys.modules.get("pydantic.v1")
    return v1 is not None and issubclass(cls, v1.BaseModel)


class _Allowed(set[tuple[str, ...]]):
    """An allowlist that also holds every data class (see the module docstring)."""

    def __contains__(self, key: object) -> bool:
        if super().__contains__(key):
            return True
        return isinstance(key, tuple) and len(key) == 2 and is_data_class(*key)


class RememSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer(pickle_fallback=False)`` that revives imported data classes, nothing else unknown."""

    def __init__(self, allowed_types: Iterable[type | tuple[str, ...]] = ()) -> None:
        super().__init__(pickle_fallback=False, allowed_msgpack_modules=None)
        self._revive()
        if allowed_types:
            extended = super().with_msgpack_allowlist(allowed_types)
            self._allowed_msgpack_modules = extended._allowed_msgpack_modules
            self._revive()

    def _revive(self) -> None:
        allowed = self._allowed_msgpack_modules
        names = set(allowed) if isinstance(allowed, set) else set()
        hook_allowlist: set[tuple[str, ...]] = names if lg_msgpack.STRICT_MSGPACK_ENABLED else _Allowed(names)
        self._unpack_ext_hook = _create_msgpack_ext_hook(hook_allowlist)

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[tuple[str, ...] | type]) -> JsonPlusSerializer:
        clone = super().with_msgpack_allowlist(extra_allowlist)
        if clone is not self and isinstance(clone, RememSerializer):
            clone._revive()
        return clone

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
