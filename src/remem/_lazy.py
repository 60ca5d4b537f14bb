"""A package's exported names imported on first use (PEP 562), the one way every remem ``__init__`` does it.

A package's ``__init__`` runs before any of its modules, so an eager one makes ``import remem.x.y`` load all
of ``remem.x``: the job queue's handlers (extraction, LangChain's language models) for ``remem forget``, the
ledger for the rate limiter. A package lists where each name lives and installs the pair this returns::

    __getattr__, __dir__ = _lazy.exports(__name__, {"remem.jobs._queue": ("JobQueue",)}, globals())

and keeps a ``TYPE_CHECKING`` block importing the same names, for type checkers and readers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from importlib import import_module
from typing import Any


def exports(
    package: str, sources: Mapping[str, Iterable[str]], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, given which module defines each name."""
    module_of = {name: module for module, names in sources.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
