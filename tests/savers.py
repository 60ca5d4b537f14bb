"""Opening one of remem's savers by backend name, for the checkpoint tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from remem.checkpoint import PostgresSaver, SqliteSaver


@contextmanager
def open_saver(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A saver on a fresh Postgres database (``kind="postgres"``) or a fresh SQLite file."""
    if kind == "postgres":
        with PostgresSaver.from_conn_string(request.getfixturevalue("pg_url")) as pg:
            yield pg
    else:
        with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
            yield saver
