"""A database that a newer remem wrote is refused, with "upgrade remem", by every part and every command.

Each schema remem keeps (the checkpointer's, the store's with its erasure journal, the usage ledger's) is a
component of the one migration runner (``remem._migrate``). A version recorded above what this remem knows
means a newer remem wrote the database: opening it to write or to read raises
:class:`~remem.errors.SchemaTooNewError` before anything is touched, and the CLI ends with that one line.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from remem import Memory, Settings
from remem._migrate import TABLE
from remem.checkpoint import checkpointer_from_url
from remem.cli import main
from remem.erasure import erase, unfinished_erasures
from remem.errors import SchemaTooNewError
from remem.store import open_store
from remem.usage import open_ledger, read_ledger


@contextmanager
def _called(fn: Callable[[], Any]) -> Iterator[Any]:
    yield fn()


# component -> the ways the library opens it (to write, then to read), and the commands that read it
OPENERS: dict[str, list[Callable[[str], AbstractContextManager[Any]]]] = {
    "checkpoint": [checkpointer_from_url, lambda url: checkpointer_from_url(url, create=False)],
    "store": [
        open_store,
        lambda url: open_store(url, read_only=True),
        lambda url: Memory.from_url(url, settings=Settings(embedder="fake")),
        lambda url: _called(lambda: erase(url, user_id="maya")),  # the erasure journal lives in it
        lambda url: _called(lambda: unfinished_erasures(url)),
    ],
    "usage": [open_ledger, read_ledger],
}
COMMANDS: dict[str, list[list[str]]] = {
    "checkpoint": [["checkpoints", "stats"], ["state", "t"], ["history", "t"]],
    "store": [["store", "stats"], ["forget", "--user", "maya", "--yes"]],
    "usage": [["usage"], ["forget", "--thread", "t", "--yes"]],  # forget must not erase a newer ledger's rows
}


def _execute(db_url: str, sql: str) -> list[tuple[Any, ...]]:
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    with psycopg.connect(db_url, autocommit=True) as pg:
        cur = pg.execute(sql)
        return cur.fetchall() if cur.description else []


def _create_everything(db_url: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from remem.usage import Meter

    with checkpointer_from_url(db_url) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    with open_store(db_url) as store:
        store.put(("docs",), "k", {"text": "tea"})
    with open_ledger(db_url) as ledger:
        Meter(ledger).record("chat", "fake", input_tokens=1, output_tokens=1, thread_id="t")


@pytest.mark.parametrize("component", sorted(OPENERS))
def test_every_part_refuses_a_schema_a_newer_remem_wrote(component: str, db_url: str) -> None:
    _create_everything(db_url)
    _execute(db_url, f"INSERT INTO {TABLE} (component, version, applied_at) VALUES ('{component}', 99, 0)")
    before = _execute(db_url, f"SELECT component, version FROM {TABLE} ORDER BY component, version")
    for opener in OPENERS[component]:
        with pytest.raises(SchemaTooNewError, match="upgrade remem") as caught, opener(db_url):
            pass
        assert f"{component} schema is at version 99" in str(caught.value)
    for argv in COMMANDS[component]:
        result = CliRunner().invoke(main, [*argv, "--db", db_url], env={"REMEM_EMBEDDER": "fake"})
        assert result.exit_code == SchemaTooNewError.exit_code == 1, (argv, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "upgrade remem" in lines[0], (argv, result.stderr)
    # nothing was migrated, recorded or rolled back by any of them
    assert _execute(db_url, f"SELECT component, version FROM {TABLE} ORDER BY component, version") == before
    if component == "usage":  # and the newer ledger's rows are all there
        from remem.layout import USAGE_LEDGER_TABLE

        assert _execute(db_url, f"SELECT count(*) FROM {USAGE_LEDGER_TABLE}") == [(1,)]
