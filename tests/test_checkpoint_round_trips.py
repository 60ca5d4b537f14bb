"""PostgreSQL writes at the limit: a checkpoint written on the head this saver last wrote is one round trip
(its statements pipelined behind a guard, prepared as psycopg prepares them), and a guard that finds the
thread moved on (another process wrote, a lease was taken) writes nothing and the write runs again the
usual way. Counted with libpq's protocol trace, never timed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from remem._lease import _postgres as lease_sessions
from remem.checkpoint import AsyncPostgresSaver, PostgresSaver
from remem.checkpoint._ops import FROM_HEAD, RUN_KEY
from tests.pg_trace import round_trips, traced

pytestmark = pytest.mark.postgres


def _checkpoint(n: int, messages: list[str]) -> Any:
    cp = empty_checkpoint()
    cp["id"] = f"1f000000-0000-6000-8000-{n:012d}"
    cp["channel_values"] = {"messages": list(messages)}
    cp["channel_versions"] = {"messages": n}
    return cp


def _put(saver: PostgresSaver, thread: str, parent: str | None, n: int, messages: list[str]) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent is not None:
        conf["checkpoint_id"] = parent
    return saver.put({"configurable": conf}, _checkpoint(n, messages), {"step": n}, {"messages": n})


def test_a_put_and_its_writes_on_the_head_are_one_round_trip_each(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        said = [f"message {i} " + "words " * 20 for i in range(3)]
        stored = _put(saver, "t", None, 1, said[:1])
        for n in range(2, 4):
            with traced(conn) as sent:
                stored = _put(saver, "t", stored["configurable"]["checkpoint_id"], n, said[:n])
            # BEGIN, the guard, the new item, the checkpoint, COMMIT: pipelined, answered once
            assert round_trips(sent) == 1, sent
            assert sent.count("Execute") == 5
        with traced(conn) as sent:
            saver.put_writes(stored, [("messages", ["a reply " * 10]), ("other", 1)], task_id="task")
        assert round_trips(sent) == 1, sent
        tup = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == said
        assert [w[1:] for w in tup.pending_writes or []] == [("messages", ["a reply " * 10]), ("other", 1)]


def test_a_write_after_another_process_wrote_reads_again_and_numbers_nothing_twice(pg_url: str) -> None:
    with (
        psycopg.connect(pg_url, autocommit=True) as a_conn,
        psycopg.connect(pg_url, autocommit=True) as b_conn,
    ):
        a, b = PostgresSaver(a_conn), PostgresSaver(b_conn)
        a.setup()
        first = _put(a, "t", None, 1, ["one"])
        second = _put(a, "t", first["configurable"]["checkpoint_id"], 2, ["one", "two"])
        # b writes on a's head: new items and a new head that a's cache does not know of
        third = _put(b, "t", second["configurable"]["checkpoint_id"], 3, ["one", "two", "from b"])
        b.put_writes(third, [("messages", ["b's write"])], task_id="b-task")
        with traced(a_conn) as sent:  # a trusts its cache: the guard fails, then the usual path
            fork = _put(a, "t", second["configurable"]["checkpoint_id"], 4, ["one", "two", "from a"])
        assert sent.count("Query") >= 1 and round_trips(sent) > 1  # the ROLLBACK, then reads
        a.put_writes(third, [("messages", ["a's write"])], task_id="a-task")
        fresh = PostgresSaver(psycopg.connect(pg_url, autocommit=True))
        try:
            got = fresh.get_tuple({"configurable": {"thread_id": "t", **third["configurable"]}})
            assert got is not None and got.checkpoint["channel_values"]["messages"] == [
                "one",
                "two",
                "from b",
            ]
            assert sorted(w[1:] for w in got.pending_writes or []) == [
                ("messages", ["a's write"]),
                ("messages", ["b's write"]),
            ]
            forked = fresh.get_tuple({"configurable": {"thread_id": "t", **fork["configurable"]}})
            assert forked is not None
            assert forked.checkpoint["channel_values"]["messages"] == ["one", "two", "from a"]
            with fresh.conn.cursor() as cur:  # type: ignore[union-attr]
                cur.execute(
                    "SELECT count(*), count(DISTINCT digest), count(DISTINCT item_no) FROM remem_cp_items"
                )
                total, digests, numbers = cur.fetchone()  # type: ignore[misc]
                assert total == digests == numbers  # each value once, no number given twice
        finally:
            fresh.conn.close()  # type: ignore[union-attr]


def test_psycopg_prepares_the_write_statements(pg_url: str) -> None:
    """The guarded write's statements are the same text every time, so psycopg prepares them (after its
    ``prepare_threshold`` uses): a steady write parses only its BEGIN and COMMIT (sent unprepared)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        stored = _put(saver, "t", None, 1, ["m0"])
        for n in range(2, 9):
            with traced(conn) as sent:
                stored = _put(
                    saver, "t", stored["configurable"]["checkpoint_id"], n, [f"m{i}" for i in range(n)]
                )
        assert sent.count("Parse") == 2 and sent.count("Bind") == sent.count("Execute") == 5


def test_a_pooled_saver_sends_no_ping_before_a_put_or_a_get(pg_url: str) -> None:
    # A pool's check costs no round trip (remem._pgpool): a put on the head is still one, a get one.
    with PostgresSaver.from_conn_string(pg_url, pool_size=1) as saver:
        saver.setup()
        pool = saver.conn
        assert isinstance(pool, ConnectionPool)
        stored = _put(saver, "t", None, 1, ["one"])
        with pool.connection() as conn:  # the pool's only connection: every call below runs on it
            pass
        with traced(conn) as sent:
            stored = _put(saver, "t", stored["configurable"]["checkpoint_id"], 2, ["one", "two"])
        assert round_trips(sent) == 1 and "Query" not in sent, sent
        with traced(conn) as sent:
            assert saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}) is not None
        # the checkpoint and its writes in one statement, the values from the cache, no transaction around
        # it (BEGIN, SET TRANSACTION, two reads and COMMIT were five round trips)
        assert sent.count("Query") == 0 and sent.count("Execute") == 1 and round_trips(sent) == 1, sent


async def test_an_async_pooled_saver_sends_no_ping_before_a_put(pg_url: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, pool_size=1) as saver:
        await saver.setup()
        pool = saver.conn
        assert isinstance(pool, AsyncConnectionPool)
        conf: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": ""}
        stored = await saver.aput(
            {"configurable": conf}, _checkpoint(1, ["one"]), {"step": 1}, {"messages": 1}
        )
        async with pool.connection() as conn:
            pass
        with traced(conn) as sent:  # type: ignore[arg-type]
            await saver.aput(stored, _checkpoint(2, ["one", "two"]), {"step": 2}, {"messages": 2})
        assert round_trips(sent) == 1 and "Query" not in sent, sent
        with traced(conn) as sent:  # type: ignore[arg-type]
            tup = await saver.aget_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == ["one", "two"]
        assert round_trips(sent) == 1 and "Query" not in sent, sent  # six before, as the sync read's five


def test_a_read_whose_values_are_not_cached_needs_no_snapshot_unless_one_is_gone(pg_url: str) -> None:
    """A fresh saver reads a checkpoint's row and writes, then its stored list and items, each statement on
    its own (no BEGIN, no COMMIT): values are never changed, only deleted. A value deleted under the read
    (a prune or an erasure between its statements) makes it read again in one snapshot."""
    said = [f"message {i} " + "words " * 10 for i in range(20)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        writer = PostgresSaver(conn)
        writer.setup()
        stored = _put(writer, "t", None, 1, said)
        writer.put_writes(stored, [("messages", ["a reply"])], task_id="task")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        reader = PostgresSaver(conn)
        reader._is_setup = True
        with traced(conn) as sent:
            tup = reader.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == said
        assert [w[1:] for w in tup.pending_writes or []] == [("messages", ["a reply"])]
        assert "Query" not in sent and round_trips(sent) == 3, sent  # the row and writes, the list, the items
    with psycopg.connect(pg_url, autocommit=True) as conn:
        reader = PostgresSaver(conn)
        reader._is_setup = True
        real = reader._transaction
        reads: list[bool] = []

        @contextmanager
        def transaction(write: bool, snapshot: bool = True) -> Iterator[Any]:
            reads.append(snapshot)
            with real(write, snapshot) as run_one:
                if not snapshot:  # what a prune in another session does between the read's statements
                    with psycopg.connect(pg_url, autocommit=True) as other:
                        other.execute(
                            "DELETE FROM remem_cp_items WHERE item_no = (SELECT max(item_no) FROM remem_cp_items)"
                        )
                yield run_one

        reader._transaction = transaction  # type: ignore[method-assign]
        with pytest.raises(KeyError):  # the snapshot finds it gone too: damaged, as a read always said
            reader.get_tuple({"configurable": {"thread_id": "t"}})
        assert reads == [False, True]


def test_a_runs_put_takes_the_threads_lease_in_its_own_transaction(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put of a run that started from the head (LangGraph's usual step) holds the thread's lease for its
    write: taken by the write's transaction (an advisory lock until it commits) and fenced there, so it
    opens no lease session (four round trips on a connection of its own, each put) and stays one round trip."""
    opened: list[str] = []
    real = lease_sessions.connection
    monkeypatch.setattr(
        lease_sessions, "connection", lambda where, reuse: opened.append(where) or real(where, reuse)
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        stored = _put(saver, "t", None, 1, ["one"])
        for n in range(2, 6):
            run_conf = {**stored["configurable"], RUN_KEY: object(), FROM_HEAD: True}
            with traced(conn) as sent:
                stored = saver.put(
                    {"configurable": run_conf}, _checkpoint(n, ["m"] * n), {"step": n}, {"messages": n}
                )
            if n > 2:  # the first trusts no cache yet
                assert round_trips(sent) == 1, sent
        assert opened == []
        tup = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and tup.checkpoint["id"] == _checkpoint(5, [])["id"]
