"""Opening one of remem's sync savers by backend name, for the checkpoint tests (through the matrix)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests import matrix


@contextmanager
def open_saver(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A saver on a fresh Postgres database (``kind="postgres"``) or a fresh SQLite file."""
    backend = "postgres" if kind == "postgres" else "sqlite_file"
    with matrix.open_cell(("saver", "sync", backend), request, tmp_path) as cell:
        yield cell.obj
