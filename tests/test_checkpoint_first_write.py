"""A fresh process's first write on a long thread reads the items it shares with the thread by their
digests (schema v3's index on ``(tid, digest)``), not every digest of the thread (issue 22, point 1).

Work is counted, never timed: the rows the saver's statements return during the write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

from remem.checkpoint import PostgresSaver, SqliteSaver
from remem.checkpoint import postgres as postgres_module
from remem.checkpoint import sqlite as sqlite_module
from remem.checkpoint._sql import SCHEMA
from tests.savers import ids_as_given

SHORT, LONG = 200, 2000
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

ALL_VERSIONS = list(range(1, SCHEMA.latest + 1))  # the schema module's own count: a bump edits no test


def _conversation(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"My locker {i} is in building {i % 13}.", id=f"m{i}")
        if i % 2 == 0
        else AIMessage(f"Noted: locker {i - 1}.", id=f"m{i}")
        for i in range(n)
    ]


def _config(thread: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(saver: Any, thread: str, parent: Any, messages: list[BaseMessage], step: int) -> Any:
    """One checkpoint whose ``messages`` channel is ``messages`` (a new version of it)."""
    previous = empty_checkpoint() if parent is None else parent.checkpoint
    checkpoint = create_checkpoint(previous, None, step)
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": step + 1}
    config = _config(thread, None if parent is None else parent.config["configurable"]["checkpoint_id"])
    saver.put(config, checkpoint, {"step": step}, {"messages": step + 1})
    return saver.get_tuple(_config(thread))


@contextmanager
def _open(kind: str, where: str) -> Iterator[Any]:
    opener = SqliteSaver if kind == "sqlite" else PostgresSaver
    with opener.from_conn_string(where) as saver:
        yield saver


def _where(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return str(tmp_path / "cp.db") if kind == "sqlite" else str(request.getfixturevalue("pg_url"))


def _long_thread(saver: Any, thread: str, n: int) -> list[BaseMessage]:
    """A thread of ``n`` messages whose state was then cut to its last four (as a summary leaves it)."""
    messages = _conversation(n)
    tup = _put(saver, thread, None, messages, 0)
    _put(saver, thread, tup, messages[-4:], 1)
    return messages[-4:]


def _first_write_rows(kind: str, where: str, thread: str, kept: list[BaseMessage], patch: Any) -> int:
    """Rows the statements return while a fresh saver writes one exchange after ``kept``."""
    module = sqlite_module if kind == "sqlite" else postgres_module
    execute = module.execute
    rows = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        out = execute(*args, **kwargs)
        rows[0] += len(out)
        return out

    with _open(kind, where) as saver:
        head = saver.get_tuple(_config(thread))
        new = [HumanMessage("My sister Oksana moved to Porto.", id="new-1"), AIMessage("OK.", id="new-2")]
        with patch.context() as p:
            p.setattr(module, "execute", counting)
            _put(saver, thread, head, [*kept, *new], 2)
        assert [m.id for m in saver.get_tuple(_config(thread)).checkpoint["channel_values"]["messages"]] == [
            *(m.id for m in kept),
            "new-1",
            "new-2",
        ]
    return rows[0]


def _item_rows(kind: str, where: str) -> int:
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM remem_cp_items").fetchone()[0])
    with psycopg.connect(where) as pg:
        row = pg.execute("SELECT COUNT(*) FROM remem_cp_items").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_fresh_process_first_write_reads_what_it_shares_not_the_whole_thread(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = _where(kind, tmp_path, request)
    counts = []
    for n in (SHORT, LONG):
        thread = f"t{n}"
        with _open(kind, where) as saver:
            kept = _long_thread(saver, thread, n)
        before = _item_rows(kind, where)
        counts.append(_first_write_rows(kind, where, thread, kept, monkeypatch))
        # The kept messages were found by digest and shared: only the two new messages are stored.
        assert _item_rows(kind, where) == before + 2
    assert counts[0] == counts[1], counts
    assert 0 < counts[1] <= 20, counts


def _as_v2(kind: str, where: str) -> None:
    """What the schema was before v3: no digest index (nor v4's fencing tokens, nor v8's short ids), versions 3 and up not
    recorded."""
    drop = (
        "DROP INDEX remem_cp_items_digest",
        "DROP TABLE remem_thread_fences",
        "DELETE FROM remem_schema WHERE component = 'checkpoint' AND version >= 3",
    )
    if kind == "sqlite":
        conn = sqlite3.connect(where, isolation_level=None)
        ids_as_given(conn, "?")
        for statement in drop:
            conn.execute(statement)
        conn.close()
        return
    with psycopg.connect(where, autocommit=True) as pg:
        ids_as_given(pg, "%s")
        for statement in drop:
            pg.execute(statement)


def _has_digest_index(kind: str, where: str) -> bool:
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            sql = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'remem_cp_items_digest'"
            return conn.execute(sql).fetchone() is not None
    with psycopg.connect(where) as pg:
        sql = "SELECT 1 FROM pg_indexes WHERE indexname = 'remem_cp_items_digest'"
        return pg.execute(sql).fetchone() is not None


def _versions(kind: str, where: str) -> list[int]:
    sql = "SELECT version FROM remem_schema WHERE component = 'checkpoint' ORDER BY version"
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            return [r[0] for r in conn.execute(sql)]
    with psycopg.connect(where) as pg:
        return [r[0] for r in pg.execute(sql).fetchall()]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_v2_database_gets_the_digest_index_and_its_threads_keep_sharing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = _where(kind, tmp_path, request)
    with _open(kind, where) as saver:
        kept = _long_thread(saver, "old", SHORT)
    _as_v2(kind, where)
    assert not _has_digest_index(kind, where)
    before = _item_rows(kind, where)
    rows = _first_write_rows(kind, where, "old", kept, monkeypatch)
    assert _has_digest_index(kind, where)
    assert _versions(kind, where) == ALL_VERSIONS
    assert _item_rows(kind, where) == before + 2
    assert rows <= 20
