"""A DeltaChannel graph's turn on remem's savers reads what a plain graph's turn reads (issue 22, point 3).

LangGraph rebuilds a ``DeltaChannel`` at the thread's head from ``get_delta_channel_history``: the seed
(the last snapshot) and every write since. remem keeps the last history it read as stored descriptors
(``_cache.Replay``) and the next turn's walk stops at that checkpoint, reading only the checkpoints
written since. Pinned here:

- a turn decodes about what a plain graph's turn decodes and reads a few checkpoint rows, not the
  checkpoints back to the last snapshot (counted: a counting serializer, the bodies decoded);
- what another process does to the thread (turns, pending writes on a checkpoint the kept history was
  read from, a prune, a delete) is seen: the reader gives what a saver with nothing kept gives, on
  SQLite and PostgreSQL, the writer a real second process;
- the kept histories are bounded (one per thread, as many threads as the heads cache);
- the async savers read the same histories.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import remem
from remem.checkpoint import AsyncSqliteSaver, PostgresSaver, SqliteSaver
from remem.checkpoint import _codec as codec
from tests.pg_trace import traced
from tests.test_checkpoint_delta import Counted, _graph

CONFIG = {"configurable": {"thread_id": "t"}}


def _turns(graph: Any, n: int, tag: str = "user") -> None:
    for i in range(n):
        graph.invoke({"items": [f"{tag}-{i}"]}, CONFIG)


def _bodies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the checkpoint bodies decoded (one per checkpoint row read)."""
    seen = [0]
    decode = codec.decode_body

    def counted(body: bytes) -> Any:
        seen[0] += 1
        return decode(body)

    monkeypatch.setattr(codec, "decode_body", counted)
    return seen


def test_a_delta_graphs_turn_reads_what_a_plain_graphs_turn_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = {}
    for delta in (False, True):
        with SqliteSaver.from_conn_string(str(tmp_path / f"turn-{delta}.sqlite")) as saver:
            graph = _graph(saver, every=100, delta=delta)
            _turns(graph, 60)  # 140 updates: the last snapshot is 40 updates back
            counted = Counted(saver)
            bodies = _bodies(monkeypatch)
            in_history = _history_transactions(saver, counted)
            _turns(graph, 10, "more")
            work[delta] = (counted.decoded, in_history, bodies[0])
            monkeypatch.undo()
    (plain_decoded, _, plain_bodies), (decoded, in_history, bodies_read) = work[False], work[True]
    assert decoded <= plain_decoded + 10, work  # the seed and the writes since, in one batch a turn
    assert in_history == [1] * 10, work  # one transaction a turn
    # the head and the three checkpoints a turn writes before it, not the 100 back to the snapshot
    assert bodies_read <= plain_bodies + 10 * 4, work


def _history_transactions(saver: Any, counted: Counted) -> list[int]:
    """The transactions of each ``get_delta_channel_history`` call, as they come."""
    out: list[int] = []
    read = saver.get_delta_channel_history

    def history(**kwargs: Any) -> Any:
        before = counted.transactions
        try:
            return read(**kwargs)
        finally:
            out.append(counted.transactions - before)

    saver.get_delta_channel_history = history
    return out


def test_get_state_reads_the_history_once_then_from_where_it_stopped(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "again.sqlite")) as saver:
        graph = _graph(saver, every=100)
        _turns(graph, 30)
        first = graph.get_state(CONFIG).values
        counted = Counted(saver)
        assert graph.get_state(CONFIG).values == first
        assert counted.transactions == 2  # get_tuple, then the history: its checkpoint and one count


# --- another process changes the thread -----------------------------------------------------------

_WRITER = """
import operator, sys
from typing import Annotated, TypedDict
sys.path.insert(0, sys.argv[3])
from tests.test_checkpoint_delta import _graph
from remem.checkpoint import PostgresSaver, SqliteSaver

kind, target, _, action = sys.argv[1:5]
opened = SqliteSaver.from_conn_string(target) if kind == "sqlite" else PostgresSaver.from_conn_string(target)
config = {"configurable": {"thread_id": "t"}}
with opened as saver:
    graph = _graph(saver, every=100)
    if action == "turns":
        for i in range(2):
            graph.invoke({"items": [f"other-{i}"]}, config)
    elif action.startswith("write:"):
        old = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": action[6:]}}
        saver.put_writes(old, [("items", ["written elsewhere"])], "another-process")
    elif action == "prune":
        saver.prune(["t"])
    elif action == "delete":
        saver.delete_thread("t")
        for i in range(3):
            graph.invoke({"items": [f"new-{i}"]}, config)
print("ok")
"""


def _other_process(kind: str, target: str, action: str) -> None:
    root = str(Path(__file__).parent.parent)
    src = str(Path(remem.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, kind, target, root, action],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "shared.sqlite")
    else:
        yield "postgres", request.getfixturevalue("pg_url")


def _open(kind: str, target: str) -> Any:
    return (
        SqliteSaver.from_conn_string(target) if kind == "sqlite" else PostgresSaver.from_conn_string(target)
    )


def _seen(saver: Any, graph: Any) -> Any:
    """The thread's state and every checkpoint's history, as a saver reads them."""
    head = graph.get_state(CONFIG)
    histories = [
        saver.get_delta_channel_history(config=saver.get_tuple(s.config).config, channels=["items"])
        for s in graph.get_state_history(CONFIG)
    ]
    return head.values, head.config, histories


@pytest.mark.parametrize("action", ["turns", "write", "prune", "delete"])
def test_what_another_process_does_to_the_thread_is_seen(target: tuple[str, str], action: str) -> None:
    kind, where = target
    with _open(kind, where) as saver:
        graph = _graph(saver, every=100)
        _turns(graph, 12)
        graph.get_state(CONFIG)  # the head's history is kept
        kept = saver._ctx.cache.replay("t", "")
        assert kept is not None and kept.span is not None
        if action == "write":
            # a checkpoint the kept history was read from (between the root and the head)
            listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(CONFIG)]
            action = f"write:{listed[len(listed) // 2]}"
        _other_process(kind, where, action)
        got = _seen(saver, graph)
        with _open(kind, where) as fresh:  # nothing kept
            want = _seen(fresh, _graph(fresh, every=100))
        assert got == want
        if action.startswith("write"):
            writes = got[2][0]["items"]["writes"]
            assert ("another-process", "items", ["written elsewhere"]) in writes
        # and the turns after it build on what is now stored
        _turns(graph, 2, "after")
        got = graph.get_state(CONFIG).values
        with _open(kind, where) as fresh:
            assert got == _graph(fresh, every=100).get_state(CONFIG).values


def test_a_put_writing_a_kept_checkpoint_again_drops_the_kept_history(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "reput.sqlite")) as saver:
        graph = _graph(saver, every=100)
        _turns(graph, 4)
        graph.get_state(CONFIG)
        kept = saver._ctx.cache.replay("t", "")
        assert kept is not None
        old = saver.get_tuple(CONFIG)
        parent = saver.get_tuple(old.parent_config)
        saver.put(parent.parent_config, parent.checkpoint, parent.metadata, {})  # the same id again
        assert saver._ctx.cache.replay("t", "") is None


def test_the_kept_histories_are_bounded(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "many.sqlite")) as saver:
        graph = _graph(saver, every=100)
        bound = saver._ctx.cache._max_threads * 4
        for n in range(bound + 20):
            config = {"configurable": {"thread_id": f"t{n}"}}
            graph.invoke({"items": ["a"]}, config)
            graph.invoke({"items": ["b"]}, config)
        assert len(saver._ctx.cache._replays) == bound


def test_the_async_saver_reads_the_same_histories(tmp_path: Path) -> None:
    db = str(tmp_path / "async.sqlite")

    async def run() -> list[Any]:
        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            graph = _graph(saver, every=3)
            seen = []
            for i in range(8):
                await graph.ainvoke({"items": [f"user-{i}"]}, CONFIG)
                seen.append((await graph.aget_state(CONFIG)).values)
            return seen

    got = asyncio.run(run())
    with SqliteSaver.from_conn_string(db) as fresh:
        graph = _graph(fresh, every=3)
        assert got[-1] == graph.get_state(CONFIG).values
        assert [len(s["items"]) for s in got] == sorted({len(s["items"]) for s in got})


# --- a put through the same saver while a history read runs (real threads, the order forced) -----------


def _reput_setup(saver: Any) -> tuple[Any, Any, Any]:
    """The head's config, a checkpoint between the root and the head, and a parent for it further back:
    put again under that parent, the checkpoint makes the head's history skip some writes."""
    graph = _graph(saver, every=100)
    _turns(graph, 6)
    head = saver.get_tuple(CONFIG)
    listed = [saver.get_tuple(t.config) for t in saver.list(CONFIG)]  # newest first
    return head.config, listed[len(listed) // 2], listed[-2]


def _paused_reads(saver: Any, reader: str) -> tuple[threading.Event, threading.Event]:
    """The first read transaction of the thread named ``reader`` waits, once committed and before what
    it found is kept, until ``go`` is set; ``read`` is set when it gets there."""
    read, go = threading.Event(), threading.Event()
    transaction = saver._transaction

    @contextlib.contextmanager
    def paused(write: bool, snapshot: bool = True) -> Iterator[Any]:
        with transaction(write, snapshot) as run_one:
            yield run_one
        if not write and threading.current_thread().name == reader and not read.is_set():
            read.set()
            assert go.wait(30)

    saver._transaction = paused
    return read, go


def _fresh_history(db: str, config: Any) -> Any:
    with SqliteSaver.from_conn_string(db) as fresh:
        return fresh.get_delta_channel_history(config=config, channels=["items"])


def test_a_reput_while_a_history_read_runs_leaves_no_stale_history(tmp_path: Path) -> None:
    """The reader reads the rows from before the re-put and would keep them after it committed."""
    db = str(tmp_path / "race.sqlite")
    with SqliteSaver.from_conn_string(db) as saver:
        head, middle, further = _reput_setup(saver)
        before = saver.get_delta_channel_history(config=head, channels=["items"])
        saver._ctx.cache._replays.clear()  # the reader below walks the whole chain and keeps it
        read, go = _paused_reads(saver, "reader")
        seen: list[Any] = []
        reader = threading.Thread(
            name="reader",
            target=lambda: seen.append(saver.get_delta_channel_history(config=head, channels=["items"])),
        )
        reader.start()
        assert read.wait(30)  # the reader has read, and keeps nothing yet
        saver.put(further.config, middle.checkpoint, middle.metadata, {})  # committed
        go.set()
        reader.join(30)
        assert seen == [before]  # what its snapshot held
        got = saver.get_delta_channel_history(config=head, channels=["items"])
        want = _fresh_history(db, head)
        assert got == want != before


def test_a_reput_before_a_history_reads_its_rows_is_not_hidden_by_the_kept_one(tmp_path: Path) -> None:
    """The reader takes the kept history, then the re-put commits, then the reader reads: the kept
    history is not what its snapshot holds, and the reader reads the chain anew."""
    db = str(tmp_path / "use.sqlite")
    with SqliteSaver.from_conn_string(db) as saver:
        head, middle, further = _reput_setup(saver)
        before = saver.get_delta_channel_history(config=head, channels=["items"])
        assert saver._ctx.cache.replay("t", "") is not None
        taken, go = threading.Event(), threading.Event()
        watch = saver._ctx.cache.watch

        def paused_watch(*args: Any) -> Any:
            out = watch(*args)
            if threading.current_thread().name == "reader":
                taken.set()
                assert go.wait(30)
            return out

        saver._ctx.cache.watch = paused_watch
        seen: list[Any] = []
        reader = threading.Thread(
            name="reader",
            target=lambda: seen.append(saver.get_delta_channel_history(config=head, channels=["items"])),
        )
        reader.start()
        assert taken.wait(30)
        saver.put(further.config, middle.checkpoint, middle.metadata, {})
        go.set()
        reader.join(30)
        want = _fresh_history(db, head)
        assert seen == [want] and want != before
        assert saver.get_delta_channel_history(config=head, channels=["items"]) == want


def test_the_async_saver_keeps_no_history_read_before_a_reput(tmp_path: Path) -> None:
    db = str(tmp_path / "arace.sqlite")
    with SqliteSaver.from_conn_string(db) as saver:
        head, middle, further = _reput_setup(saver)

    async def run() -> tuple[Any, Any, Any]:
        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            before = await saver.aget_delta_channel_history(config=head, channels=["items"])
            saver._ctx.cache._replays.clear()
            read, go = asyncio.Event(), asyncio.Event()
            transaction = saver._transaction

            @contextlib.asynccontextmanager
            async def paused(write: bool, snapshot: bool = True) -> AsyncIterator[Any]:
                async with transaction(write, snapshot) as run_one:
                    yield run_one
                if not write and not read.is_set():
                    read.set()
                    await go.wait()

            saver._transaction = paused
            reader = asyncio.create_task(saver.aget_delta_channel_history(config=head, channels=["items"]))
            await read.wait()
            await saver.aput(further.config, middle.checkpoint, middle.metadata, {})
            go.set()
            seen = await reader
            got = await saver.aget_delta_channel_history(config=head, channels=["items"])
            return before, seen, got

    before, seen, got = asyncio.run(run())
    assert seen == before
    assert got == _fresh_history(db, head) != before


# --- PostgreSQL: a turn's history in one round trip --------------------------------------------------


def _history_trips(saver: Any, conn: Any) -> list[int]:
    """The round trips of each history read the saver makes, as they come."""
    out: list[int] = []
    read = saver._read_history

    def traced_read(*args: Any) -> Any:
        with traced(conn) as sent:
            found = read(*args)
        out.append(sent.round_trips)
        return found

    saver._read_history = traced_read
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("every", [100, 4])
def test_a_turns_history_on_postgres_is_one_round_trip(pg_url: str, every: int) -> None:
    """The chain since the kept history, its pending writes and the check of the kept span are one
    statement, outside a transaction (its snapshot is the statement's); a read that needs more (a new
    snapshot passed, a value not cached) runs again in a snapshot."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        graph = _graph(saver, every=every)
        _turns(graph, 3)
        trips = _history_trips(saver, conn)
        _turns(graph, 8, "more")
        got = graph.get_state(CONFIG).values
        with _open("postgres", pg_url) as fresh:
            assert got == _graph(fresh, every=every).get_state(CONFIG).values
    # eight turns and the get_state (less those whose head holds a snapshot): one trip each, and once one
    # more (psycopg prepares the statement)
    assert len(trips) == (9 if every == 100 else 7) and sum(trips) <= len(trips) + 1, trips
