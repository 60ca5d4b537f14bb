"""The backend matrix: every storage component of remem, sync and async, on every backend.

A cell is (component, flavour, backend). ``open_cell`` opens the cell's object on a fresh database and
hands back a :class:`Cell` whose ``call`` drives either flavour the same way (``call("put", ...)`` is
``put`` on a sync object and ``await aput`` on an async one, each async cell on its own event loop),
so one contract runs unchanged over every cell. Cells that do not exist are named in ``MISSING`` with
the reason, and the fixture skips them with it: never silently absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from remem.testing import FakeEmbedder

COMPONENTS = ("store", "saver", "memory")
FLAVOURS = ("sync", "async")
BACKENDS = ("sqlite_file", "sqlite_memory", "postgres", "pgvector")

# (component, flavour, backend) -> why the cell does not exist. Empty today: every component has both
# flavours on every backend. A component that loses one adds its cell here, and the matrix says so.
MISSING: dict[tuple[str, str, str], str] = {}

DIMS = 64


# Backends that need a server, each named as the mark that selects its tests.
SERVER_MARKS = ("postgres", "pgvector")


def backend_params(*names: str) -> list[Any]:
    """Backend names as pytest params, each marked for the server it needs (``postgres``, ``pgvector``);
    a mark given at collection is what ``-m "not postgres"`` selects on."""
    return [
        pytest.param(name, marks=[getattr(pytest.mark, name)] if name in SERVER_MARKS else [])
        for name in names
    ]


def cells() -> list[Any]:
    """Every cell of the matrix as a pytest param, marked for the server it needs."""
    params = []
    for component, flavour, backend in itertools.product(COMPONENTS, FLAVOURS, BACKENDS):
        marks = []
        if backend == "postgres":
            marks.append(pytest.mark.postgres)
        elif backend == "pgvector":
            marks.append(pytest.mark.pgvector)
        params.append(
            pytest.param((component, flavour, backend), id=f"{component}-{flavour}-{backend}", marks=marks)
        )
    return params


@dataclass
class Cell:
    """An open cell: ``obj`` is the store, saver or memory client; ``call`` drives it in its flavour."""

    component: str
    flavour: str
    backend: str
    obj: Any
    runner: asyncio.Runner | None

    def call(self, target: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """``target.name(...)`` on a sync cell, ``await target.aname(...)`` on an async one; iterators
        (``list``) come back as lists."""
        if self.runner is None:
            result = getattr(target, name)(*args, **kwargs)
            return list(result) if inspect.isgenerator(result) else result
        result = getattr(target, "a" + name)(*args, **kwargs)
        if inspect.isasyncgen(result) or hasattr(result, "__anext__"):
            return self.runner.run(_collect(result))
        return self.runner.run(result)


async def _collect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


def _opener(component: str, flavour: str, backend: str, target: str) -> Any:
    """The context manager that opens the cell's object on ``target`` (a path, ``:memory:`` or a URL)."""
    index = {"dims": DIMS, "embed": FakeEmbedder(DIMS), "fields": ["text"]}
    if component == "saver":
        from remem import checkpoint

        name = ("Async" if flavour == "async" else "") + (
            "Sqlite" if backend.startswith("sqlite") else "Postgres"
        )
        return getattr(checkpoint, name + "Saver").from_conn_string(target)
    from remem import store

    name = ("Async" if flavour == "async" else "") + (
        "Sqlite" if backend.startswith("sqlite") else "Postgres"
    )
    if component == "memory":
        index = {"dims": DIMS, "embed": FakeEmbedder(DIMS), "fields": ["content"]}
    return getattr(store, name + "Store").from_conn_string(target, index=index)


@contextlib.contextmanager
def open_cell(cell: tuple[str, str, str], request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cell]:
    """Open ``cell`` on a fresh database (a new file, ``:memory:``, a new Postgres database)."""
    component, flavour, backend = cell
    reason = MISSING.get(cell)
    if reason:
        pytest.skip(f"{component} has no {flavour} flavour on {backend}: {reason}")
    target: str = {
        "sqlite_file": lambda: str(tmp_path / "matrix.db"),
        "sqlite_memory": lambda: ":memory:",
        "postgres": lambda: str(request.getfixturevalue("pg_url")),
        "pgvector": lambda: str(request.getfixturevalue("pgvector_url")),
    }[backend]()
    opener = _opener(component, flavour, backend, target)
    if flavour == "sync":
        with opener as obj:
            yield Cell(component, flavour, backend, _wrap(component, obj), None)
        return
    with asyncio.Runner() as runner:
        obj = runner.run(opener.__aenter__())
        try:
            if component == "saver":
                runner.run(obj.setup())
            yield Cell(component, flavour, backend, _wrap(component, obj), runner)
        finally:
            runner.run(opener.__aexit__(None, None, None))


def _wrap(component: str, obj: Any) -> Any:
    if component == "saver" and hasattr(obj, "setup") and not inspect.iscoroutinefunction(obj.setup):
        obj.setup()
    if component == "memory":
        from remem import Memory

        return Memory(obj)
    return obj
