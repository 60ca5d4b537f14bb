"""Drop-in parity with the stock savers: user classes in state, any row factory, pipe=, metadata and
filters as stock keeps them; and the differences remem makes on purpose, pinned."""

from __future__ import annotations

import dataclasses
import enum
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, cast

import ormsgpack
import psycopg
import pytest
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_KW_ARGS, EXT_CONSTRUCTOR_SINGLE_ARG
from langgraph.checkpoint.sqlite import SqliteSaver as StockSqliteSaver
from langgraph.graph import StateGraph
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from pydantic import BaseModel

from remem.checkpoint import AsyncPostgresSaver, PostgresSaver, SqliteSaver
from remem.checkpoint._serde import RememSerializer
from remem.errors import ConfigError


class Profile(BaseModel):
    name: str
    tags: list[str]


@dataclasses.dataclass
class Address:
    city: str
    zip_code: str


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(NamedTuple):
    x: int
    y: int


class State(TypedDict):
    value: Any


def _graph(checkpointer: Any) -> Any:
    def node(state: State) -> dict[str, Any]:
        return {
            "value": {
                "profile": Profile(name="Ada", tags=["a"]),
                "address": Address("Paris", "75001"),
                "color": Color.BLUE,
                "point": Point(1, 2),
                "plain": [1, "two"],
            }
        }

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.set_entry_point("node")
    return builder.compile(checkpointer=checkpointer)


def _restored(checkpointer: Any) -> dict[str, Any]:
    graph = _graph(checkpointer)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"value": None}, config)
    value: dict[str, Any] = graph.get_state(config).values["value"]
    return value


@contextmanager
def _savers(tmp_path: Path, pg_url: str) -> Iterator[dict[str, Any]]:
    with (
        StockSqliteSaver.from_conn_string(str(tmp_path / "stock.db")) as stock,
        SqliteSaver.from_conn_string(tmp_path / "remem.db") as remem_sqlite,
        PostgresSaver.from_conn_string(pg_url) as remem_pg,
    ):
        yield {"stock-sqlite": stock, "remem-sqlite": remem_sqlite, "remem-postgres": remem_pg}


@pytest.mark.postgres
def test_user_classes_in_state_come_back_as_their_classes(tmp_path: Path, pg_url: str) -> None:
    expected = _restored(InMemorySaver())
    assert [type(v) for v in expected.values()] == [Profile, Address, Color, Point, list]
    with _savers(tmp_path, pg_url) as savers:
        for name, saver in savers.items():
            got = _restored(saver)
            assert got == expected, name
            assert [type(v) for v in got.values()] == [type(v) for v in expected.values()], name


def test_a_fresh_reader_revives_them_too(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
        _restored(saver)
    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as reader:  # no cache: decoded from the file
        value = _graph(reader).get_state({"configurable": {"thread_id": "t"}}).values["value"]
    assert isinstance(value["profile"], Profile) and value["color"] is Color.BLUE


def _ext(code: int, *payload: Any) -> tuple[str, bytes]:
    return "msgpack", ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(payload)))


def test_stored_callables_stay_data_and_nothing_is_imported(tmp_path: Path) -> None:
    serde = RememSerializer()
    marker = tmp_path / "pwned"
    # A tampered row naming os.system: stock's permissive default would run it.
    assert serde.loads_typed(_ext(EXT_CONSTRUCTOR_SINGLE_ARG, "os", "system", f"touch {marker}")) == (
        f"touch {marker}"
    )
    assert not marker.exists()
    assert "antigravity" not in sys.modules
    loaded = serde.loads_typed(_ext(EXT_CONSTRUCTOR_KW_ARGS, "antigravity", "geohash", {"x": 1}))
    assert loaded == {"x": 1} and "antigravity" not in sys.modules  # reading imports nothing
    # A class that is not a data class (subprocess.Popen) stays data as well.
    assert serde.loads_typed(_ext(EXT_CONSTRUCTOR_SINGLE_ARG, "subprocess", "Popen", "true")) == "true"
    # The saver's default serializer is this one.
    with SqliteSaver.from_conn_string(":memory:") as saver:
        assert isinstance(saver.serde, RememSerializer)


def test_strict_mode_keeps_to_langgraphs_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.checkpoint.serde import _msgpack

    monkeypatch.setattr(_msgpack, "STRICT_MSGPACK_ENABLED", True)
    data = RememSerializer().dumps_typed(Address("Oslo", "0150"))
    assert RememSerializer().loads_typed(data) == {"city": "Oslo", "zip_code": "0150"}
    allowed = RememSerializer().with_msgpack_allowlist([Address])
    assert allowed.loads_typed(data) == Address("Oslo", "0150")


CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _exercise(saver: Any) -> None:
    saver.setup()
    stored = saver.put(CONFIG, empty_checkpoint(), {"step": 1, "writes": {"n": 1}}, {})
    saver.put_writes(stored, [("ch", "v")], task_id="task")
    tup = saver.get_tuple(CONFIG)
    assert tup is not None and tup.pending_writes == [("task", "ch", "v")]
    assert [t.metadata["step"] for t in saver.list(CONFIG)] == [1]


@pytest.mark.postgres
def test_connections_and_pools_with_dict_rows(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        _exercise(PostgresSaver(conn))
        with conn.pipeline() as pipe:  # as LangGraph's own tests build it
            piped = PostgresSaver(conn, pipe=pipe)
            assert piped.get_tuple(CONFIG) is not None
            piped.put(CONFIG, empty_checkpoint(), {"step": 2}, {})
        latest = PostgresSaver(conn).get_tuple(CONFIG)
        assert latest is not None and latest.metadata["step"] == 2
    with ConnectionPool(pg_url, kwargs={"autocommit": True, "row_factory": dict_row}) as pool:
        assert PostgresSaver(pool).get_tuple(CONFIG) is not None
        with pytest.raises(ConfigError, match="single Connection"), conn_pipe(pg_url) as pipe:
            PostgresSaver(pool, pipe=pipe)


@contextmanager
def conn_pipe(url: str) -> Iterator[psycopg.Pipeline]:
    with psycopg.connect(url, autocommit=True) as conn, conn.pipeline() as pipe:
        yield pipe


@pytest.mark.postgres
async def test_async_pools_with_dict_rows(pg_url: str) -> None:
    async with AsyncConnectionPool(
        pg_url, kwargs={"autocommit": True, "row_factory": dict_row}, open=False
    ) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        stored = await saver.aput(CONFIG, empty_checkpoint(), {"step": 1}, {})
        await saver.aput_writes(stored, [("ch", "v")], task_id="task")
        tup = await saver.aget_tuple(CONFIG)
        assert tup is not None and tup.pending_writes == [("task", "ch", "v")]
    conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True, row_factory=dict_row)
    async with conn, conn.pipeline() as pipe:
        piped = AsyncPostgresSaver(conn, pipe=pipe)
        assert (await piped.aget_tuple(CONFIG)) is not None


def test_metadata_is_kept_whole_and_filters_take_dotted_paths(tmp_path: Path) -> None:
    meta = {"writes": {"foo": "bar"}, "access-level": "public", "user": {"access-level": "nested", "1a": 2}}
    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
        saver.put(CONFIG, empty_checkpoint(), cast(CheckpointMetadata, meta), {})
        tup = saver.get_tuple(CONFIG)
        assert tup is not None and tup.metadata["writes"] == {"foo": "bar"}  # as InMemorySaver / SqliteSaver
        for key, value in [("access-level", "public"), ("user.access-level", "nested"), ("user.1a", 2)]:
            assert len(list(saver.list(None, filter={key: value}))) == 1, key
        assert list(saver.list(None, filter={"user.missing": None})) == []
        assert list(saver.list(None, filter={"user.access-level": "public"})) == []


# Differences on purpose (each in the savers' docstrings).


async def test_a_sync_saver_serves_async_calls(tmp_path: Path) -> None:
    # Stock SqliteSaver raises NotImplementedError here; remem runs the sync method in a worker thread.
    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
        await saver.aput(CONFIG, empty_checkpoint(), {"step": 1}, {})
        assert (await saver.aget_tuple(CONFIG)) is not None
        assert [t.metadata["step"] async for t in saver.alist(CONFIG)] == [1]


def test_any_filter_key_is_safe(tmp_path: Path) -> None:
    # Stock SqliteSaver refuses keys that could break its SQL (ValueError "Invalid filter key"); remem
    # filters after reading, so a key never reaches SQL and any key is just a key.
    odd = "access') = 'public' OR '1'='1' OR json_extract(metadata, '$."
    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
        saver.put(CONFIG, empty_checkpoint(), cast(CheckpointMetadata, {odd: "x"}), {})
        assert len(list(saver.list(None, filter={odd: "x"}))) == 1
        assert list(saver.list(None, filter={odd: "public"})) == []


@pytest.mark.postgres
def test_pending_sends_of_old_checkpoints_are_not_moved(pg_url: str) -> None:
    # Stock PostgresSaver copies TASKS writes of a parent (format < 4) into the child's channel values;
    # InMemorySaver and SqliteSaver do not, and neither does remem (LangGraph >= 0.3 never writes them so).
    from langgraph.checkpoint.base import create_checkpoint
    from langgraph.checkpoint.serde.types import TASKS

    with PostgresSaver.from_conn_string(pg_url) as saver:
        first = saver.put(CONFIG, empty_checkpoint(), {}, {})
        saver.put_writes(first, [(TASKS, "send-1")], task_id="task-1")
        second = saver.put(first, create_checkpoint(empty_checkpoint(), {}, 1), {}, {})
        tup = saver.get_tuple(second)
        assert tup is not None and TASKS not in tup.checkpoint["channel_values"]


def _sessions(database_url: str) -> list[str]:
    """The sessions still open on the database once a closed client's backends have had time to exit."""
    from tests.conftest import POSTGRES_URL

    database = database_url.partition("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        # A backend exits a moment after its client closes the socket; a leaked one never does.
        give_up = time.monotonic() + 10
        while True:
            rows = admin.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = %s", [database]
            ).fetchall()
            if not rows or time.monotonic() > give_up:
                break
            time.sleep(0.05)
        names = [str(row[0]) for row in rows]
        if not names:  # as after a stock saver: the database can be dropped without FORCE
            admin.execute(f'DROP DATABASE "{database}"')
    return names


@pytest.mark.postgres
@pytest.mark.parametrize("pipeline", [False, True], ids=["pool", "pipeline"])
def test_a_closed_saver_leaves_no_session_behind(pg_url: str, pipeline: bool) -> None:
    # A graph run takes the thread's lease on a connection of its own; closing the saver closes it too.
    with PostgresSaver.from_conn_string(pg_url, pipeline=pipeline) as saver:
        _restored(saver)
    assert _sessions(pg_url) == []


@pytest.mark.postgres
@pytest.mark.parametrize("pipeline", [False, True], ids=["pool", "pipeline"])
async def test_a_closed_async_saver_leaves_no_session_behind(pg_url: str, pipeline: bool) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, pipeline=pipeline) as saver:
        graph = _graph(saver)
        await graph.ainvoke({"value": None}, {"configurable": {"thread_id": "t"}})
    assert _sessions(pg_url) == []


@pytest.mark.postgres
def test_a_stored_none_is_a_delta_seed(tmp_path: Path, pg_url: str) -> None:
    # The base class's contract: the walk stops at the nearest checkpoint that holds the channel, None too.
    from langgraph.checkpoint.base.id import uuid6

    def history(saver: Any) -> Any:
        parent: Any = None
        for step in range(3):
            config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            if parent is not None:
                config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=step))
            checkpoint["channel_versions"]["items"] = f"v{step}"
            if step == 1:
                checkpoint["channel_values"]["items"] = None
            parent = saver.put(config, checkpoint, {"step": step}, {"items": "v1"} if step == 1 else {})
            saver.put_writes(parent, [("items", f"w{step}")], f"task-{step}")
        return saver.get_delta_channel_history(config=parent, channels=["items"])["items"]

    stock = history(InMemorySaver())
    assert stock == {"seed": None, "writes": [("task-1", "items", "w1")]}
    with (
        SqliteSaver.from_conn_string(tmp_path / "d.db") as lite,
        PostgresSaver.from_conn_string(pg_url) as pg,
    ):
        assert history(lite) == history(pg) == stock
