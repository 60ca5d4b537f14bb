"""How checkpoint and task ids are stored (schema v8): a uuid in 22 characters that sort as the ids do, any
other id as it is after a mark; the ids a v7 database holds are turned into that form by its migration."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from remem.checkpoint import _ids
from remem.errors import StorageError
from tests.savers import open_saver
from tests.test_checkpoint_storage import KINDS, _cfg, chat, talk

uuids = st.uuids().map(str)


@settings(max_examples=300, deadline=None)
@given(a=st.one_of(uuids, st.text()), b=st.one_of(uuids, st.text()))
def test_any_id_round_trips_and_uuids_keep_their_order(a: str, b: str) -> None:
    assert _ids.shown(_ids.stored(a)) == a
    kinds = [len(x) == 36 and _ids._UUID.fullmatch(x) is not None for x in (a, b)]
    if all(kinds):
        assert len(_ids.stored(a)) == 22
        assert (a < b) == (_ids.stored(a) < _ids.stored(b))
    elif not any(kinds):
        assert (a < b) == (_ids.stored(a) < _ids.stored(b))


_SAMPLES = [str(uuid.uuid4()) for _ in range(50)] + [
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "1F1F0153-0173-6030-BFFF-9D4D25941BBD",  # upper case: not the form LangGraph writes, kept as it is
    "1",
    "",
    "checkpoint-1",
]


def test_the_migrations_sql_stores_ids_as_the_code_does() -> None:
    conn = sqlite3.connect(":memory:")
    expr = _ids._expression("x", "sqlite")
    for id_ in [*_SAMPLES, None]:
        (got,) = conn.execute(f"SELECT {expr} FROM (SELECT ? AS x)", (id_,)).fetchone()
        assert got == (None if id_ is None else _ids.stored(id_))


@pytest.mark.postgres
def test_the_migrations_sql_stores_ids_as_the_code_does_on_postgres(pg_url: str) -> None:
    expr = _ids._expression("x", "postgres")
    with psycopg.connect(pg_url) as conn:
        for id_ in [*_SAMPLES, None]:
            row = conn.execute(f"SELECT {expr} FROM (SELECT %s::text AS x) s", (id_,)).fetchone()
            assert row is not None and row[0] == (None if id_ is None else _ids.stored(id_))


def _execute(saver: Any, text: str, params: tuple[Any, ...] = (), write: bool = False) -> Any:
    with saver._transaction(write) as execute:
        return execute(saver._ctx.q(text, params, "all" if not write else "none"))


def _as_v7(saver: Any) -> None:
    """Turn the saver's database back into what schema v7 held: every id as it was given."""
    tables = {
        "remem_cp_checkpoints": ("checkpoint_id", "parent_id"),
        "remem_cp_writes": ("checkpoint_id", "task_id"),
    }
    for table, (first, second) in tables.items():
        for old, other in _execute(saver, f"SELECT DISTINCT {first}, {second} FROM {table}"):
            back = (_ids.shown(old), _ids.maybe_shown(other), old, other)
            _execute(
                saver,
                f"UPDATE {table} SET {first} = ?, {second} = ? WHERE {first} = ? AND {second} IS NOT DISTINCT FROM ?",
                back,
                write=True,
            )
    _execute(saver, "DELETE FROM remem_schema WHERE component = 'checkpoint' AND version >= 8", write=True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_v7_database_gets_its_ids_stored_short_and_reads_as_before(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "t", 3)
        saver.put_writes(
            graph.get_state(_cfg("t")).config, [("messages", [HumanMessage("pending")])], "task-1"
        )
        history = [(s.config, s.parent_config, s.values) for s in graph.get_state_history(_cfg("t"))]
        head = saver.get_tuple(_cfg("t"))
        _as_v7(saver)
        ((longest,),) = _execute(saver, "SELECT max(length(checkpoint_id)) FROM remem_cp_checkpoints")
        assert longest == 36
    with open_saver(kind, tmp_path, request) as migrated:
        graph = chat(migrated)
        assert [(s.config, s.parent_config, s.values) for s in graph.get_state_history(_cfg("t"))] == history
        assert migrated.get_tuple(_cfg("t")) == head
        for table, column in [
            ("remem_cp_checkpoints", "checkpoint_id"),
            ("remem_cp_checkpoints", "parent_id"),
        ]:
            ((longest,),) = _execute(migrated, f"SELECT max(length({column})) FROM {table}")
            assert longest == 22
        tasks = {row[0] for row in _execute(migrated, "SELECT task_id FROM remem_cp_writes")}
        assert _ids.stored("task-1") in tasks and {len(t) for t in tasks} == {7, 22}
        talk(graph, "t", 1, start=3)
        assert len(graph.get_state(_cfg("t")).values["messages"]) == 8


def test_a_value_stored_cannot_have_made_is_refused_not_read_as_another_id() -> None:
    for value in [
        str(uuid.uuid4()),
        "1F1F0153-0173-6030-BFFF-9D4D25941BBD",
        "short",
        "A" * 21 + "B",
        "A" * 23,
    ]:
        with pytest.raises(StorageError, match="older than v8"):
            _ids.shown(value)


@pytest.mark.parametrize("kind", KINDS)
def test_an_id_an_older_remem_wrote_after_the_upgrade_is_refused(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        talk(chat(saver), "t", 2)
        ((head,),) = _execute(saver, "SELECT max(checkpoint_id) FROM remem_cp_checkpoints")
        # what a process that opened the database before schema v8 writes: the id as LangGraph gave it
        _execute(
            saver,
            "UPDATE remem_cp_checkpoints SET checkpoint_id = ? WHERE checkpoint_id = ?",
            (_ids.shown(head), head),
            write=True,
        )
    with (
        open_saver(kind, tmp_path, request) as reopened,
        pytest.raises(StorageError, match="Stop every older remem process before upgrading"),
    ):
        list(reopened.list(_cfg("t")))


@pytest.mark.parametrize("kind", KINDS)
def test_ids_not_in_the_lowercase_uuid_form_sort_before_every_uuid(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # the difference from the stock savers the README and _ids keep: stock compares the ids' text
    given = [
        "00000000-0000-0000-0000-000000000001",
        "1F1F0153-0173-6030-BFFF-9D4D25941BBD",
        "1f1f0153-0173-6030-bfff-9d4d25941bbd",
        "checkpoint-1",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
    ]
    stock = InMemorySaver()
    with open_saver(kind, tmp_path, request) as saver:
        for checkpointer in (saver, stock):
            for id_ in given:
                checkpoint = {**empty_checkpoint(), "id": id_}
                checkpointer.put(
                    _cfg("t") | {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {}, {}
                )
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("t"))]
    assert [t.config["configurable"]["checkpoint_id"] for t in stock.list(_cfg("t"))] == sorted(
        given, reverse=True
    )
    assert listed == [
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "1f1f0153-0173-6030-bfff-9d4d25941bbd",
        "00000000-0000-0000-0000-000000000001",
        "checkpoint-1",
        "1F1F0153-0173-6030-BFFF-9D4D25941BBD",
    ]
