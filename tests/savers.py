"""Opening one of remem's sync savers by backend name, and putting stored ids back as old schemas held them, for the checkpoint tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from remem.checkpoint import _ids
from tests import matrix


@contextmanager
def open_saver(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A saver on a fresh Postgres database (``kind="postgres"``) or a fresh SQLite file."""
    backend = "postgres" if kind == "postgres" else "sqlite_file"
    with matrix.open_cell(("saver", "sync", backend), request, tmp_path) as cell:
        yield cell.obj


def ids_as_given(conn: Any, ph: str) -> None:
    """Every stored id back in the form LangGraph gave it, as a database from before schema v8 held it
    (v8, run again, stores them short; v10's ts is read against the id as given)."""
    tables = {
        "remem_cp_checkpoints": ("checkpoint_id", "parent_id"),
        "remem_cp_writes": ("checkpoint_id", "task_id"),
    }
    for table, (first, second) in tables.items():
        for old, other in conn.execute(f"SELECT DISTINCT {first}, {second} FROM {table}").fetchall():
            conn.execute(
                f"UPDATE {table} SET {first} = {ph}, {second} = {ph}"
                f" WHERE {first} = {ph} AND {second} IS NOT DISTINCT FROM {ph}",
                (_ids.shown(old), _ids.maybe_shown(other), old, other),
            )
