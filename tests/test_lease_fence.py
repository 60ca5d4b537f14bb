"""A lease lost after its holder's last check and before its write commits: the write is refused by the
thread's fencing token, in the write's own transaction, and writes nothing.

The holder's check (:meth:`ThreadLease.verify`) passes; then, before the write commits, the lease is lost
the way a deployment loses it (PostgreSQL ends the lease's session; a SQLite lease file is deleted) and a
second process takes the thread and writes. The seam is the check itself: the attack runs right after
it returns. Before the fence the first writer's write then committed over the second's: an append's
message numbers were taken again (an acknowledged message lost), a checkpoint became the head over the
second process's turn.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.store.base import PutOp

from remem import Memory, Settings, run_turn
from remem._lease import ThreadLease, athread_lease, carry_lease, thread_lease
from remem._lease._fence import lease_key
from remem.errors import StorageError
from tests.lease_workers import THREAD, agent_for, append_worker, context, open_saver, turn_worker

SETTINGS = Settings(embedder="fake")


def _terminate_lease_sessions(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'remem-lease' AND datname = current_database()"
        ).fetchall()
    return len(rows)


@pytest.fixture
def after_next_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, Callable[[], None]], None]]:
    """``arm(scope, attack)``: run ``attack`` once, right after the next check of a ``scope`` lease passes."""
    real = ThreadLease.verify
    armed: list[tuple[str, Callable[[], None]]] = []

    def verify(self: ThreadLease) -> None:
        real(self)
        if armed and armed[0][0] == self.scope:
            armed.pop()[1]()

    monkeypatch.setattr(ThreadLease, "verify", verify)
    yield lambda scope, attack: armed.append((scope, attack))
    assert not armed, "the attack never ran"


def _lose_lease(kind: str, target: str) -> None:
    if kind == "postgres":
        assert _terminate_lease_sessions(target) >= 1  # the holder's lease session among them
    else:
        os.unlink(f"{target}-lease")


def _run_child(worker: Any, *args: Any) -> None:
    child = context().Process(target=worker, args=args)
    child.start()
    child.join(60)
    assert child.exitcode == 0  # it took the lease the first writer still believes it holds, and wrote


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    kind = request.param
    if kind == "postgres":
        return kind, request.getfixturevalue("pg_url")
    return kind, str(tmp_path / "fence.db")


def _url(kind: str, target: str) -> str:
    return target if kind == "postgres" else f"sqlite:///{target}"


@pytest.mark.parametrize("where", BACKENDS, indirect=True)
def test_an_append_whose_lease_is_taken_between_its_check_and_its_commit_writes_nothing(
    where: tuple[str, str], tmp_path: Path, after_next_check: Callable[[str, Callable[[], None]], None]
) -> None:
    kind, target = where
    url = _url(kind, target)
    acks = tmp_path / "acks.txt"

    def attack() -> None:
        _lose_lease(kind, target)
        _run_child(append_worker, url, 9, 1, str(acks))

    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = memory.thread(THREAD, user_id="maya")
        thread.add_messages([{"role": "user", "content": "first", "id": "first"}])
        after_next_check("memory", attack)
        with pytest.raises(StorageError, match="was lost") as refused:
            thread.add_messages([{"role": "assistant", "content": "mine", "id": "mine"}])
        assert "fencing token moved on" in str(refused.value) and "This write was not made" in str(
            refused.value
        )
    assert [r["id"] for r in map(json.loads, acks.read_text().splitlines()) if "id" in r] == ["w9-m0"]
    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = memory.get_thread(THREAD)
        stored = [m.id for m in thread.messages()]
        info = thread.info()
    assert stored == ["first", "w9-m0"]  # the other writer's acknowledged message, nothing of "mine"
    assert info.message_count == 2


def _messages(tup: Any) -> list[str]:
    return [m.text for m in tup.checkpoint["channel_values"].get("messages", [])]


@pytest.mark.parametrize("where", BACKENDS, indirect=True)
def test_a_checkpoint_whose_lease_is_taken_between_its_check_and_its_commit_writes_nothing(
    where: tuple[str, str], tmp_path: Path, after_next_check: Callable[[str, Callable[[], None]], None]
) -> None:
    kind, target = where
    acks = tmp_path / "acks.txt"
    head = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}

    def attack() -> None:
        _lose_lease(kind, target)
        _run_child(turn_worker, kind, target, 9, 1, str(acks))

    with open_saver(kind, target) as saver:
        run_turn(agent_for(saver), THREAD, "first")
        before = saver.get_tuple(head)
        assert before is not None
        mine = create_checkpoint(before.checkpoint, None, 99)
        with thread_lease(saver.lease_target, THREAD, scope="checkpoint") as lease:
            config = carry_lease(
                {**before.config, "configurable": dict(before.config["configurable"])}, lease
            )
            after_next_check("checkpoint", attack)
            with pytest.raises(StorageError, match="fencing token moved on"):
                saver.put(config, mine, {"source": "update", "step": 99}, {})
        assert acks.read_text().splitlines() == ["w9 q0"]
        now = saver.get_tuple(head)
        assert now is not None and now.checkpoint["id"] != mine["id"]
        assert "w9 q0" in _messages(now)  # the other process's turn is the thread's head
        assert all(t.checkpoint["id"] != mine["id"] for t in saver.list(head))  # nothing of the refused put


@pytest.mark.parametrize("where", BACKENDS, indirect=True)
async def test_an_async_append_whose_lease_is_taken_between_its_check_and_its_commit_writes_nothing(
    where: tuple[str, str], tmp_path: Path, after_next_check: Callable[[str, Callable[[], None]], None]
) -> None:
    kind, target = where
    url = _url(kind, target)
    acks = tmp_path / "acks.txt"

    def attack() -> None:
        _lose_lease(kind, target)
        _run_child(append_worker, url, 9, 1, str(acks))

    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = await memory.athread(THREAD, user_id="maya")
        await thread.aadd_messages([{"role": "user", "content": "first", "id": "first"}])
        after_next_check("memory", attack)
        with pytest.raises(StorageError, match="fencing token moved on"):
            await thread.aadd_messages([{"role": "assistant", "content": "mine", "id": "mine"}])
        stored = [m.id for m in await (await memory.aget_thread(THREAD)).amessages()]
    assert stored == ["first", "w9-m0"]


def _move_on(kind: str, target: str, scope: str, thread_id: str) -> None:
    """What another writer's taking of the lease does to the token (its lease itself is not needed here)."""
    sql = "UPDATE remem_thread_fences SET fence = fence + 1 WHERE lease_key = ?"
    key = lease_key(scope, thread_id)
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as conn:
            assert conn.execute(sql, (key,)).rowcount == 1
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as pg:
        assert pg.execute(sql.replace("?", "%s"), (key,)).rowcount == 1


@pytest.mark.parametrize("where", BACKENDS, indirect=True)
async def test_async_stores_and_savers_write_nothing_once_the_token_moved_on(where: tuple[str, str]) -> None:
    """The async drivers' writes (a store's ``afenced_batch``, a saver's ``aput`` / ``aput_writes``) check
    the token in their own transaction too."""
    from remem.checkpoint import AsyncPostgresSaver, AsyncSqliteSaver
    from remem.store import AsyncPostgresStore, AsyncSqliteStore

    kind, target = where
    store_class: Any = AsyncSqliteStore if kind == "sqlite" else AsyncPostgresStore
    async with store_class.from_conn_string(target) as store:
        async with athread_lease(store.lease_target, "t", scope="memory") as lease:
            await store.afenced_batch([PutOp(("n",), "a", {"v": 1})], lease.fenced)
            _move_on(kind, target, "memory", "t")
            with pytest.raises(StorageError, match="fencing token moved on"):
                await store.afenced_batch([PutOp(("n",), "b", {"v": 2})], lease.fenced)
        assert await store.aget(("n",), "a") is not None and await store.aget(("n",), "b") is None

    saver_class: Any = AsyncSqliteSaver if kind == "sqlite" else AsyncPostgresSaver
    head = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    async with saver_class.from_conn_string(target) as saver:
        await saver.setup()
        async with athread_lease(await saver.alease_target(), "t", scope="checkpoint") as lease:
            first = await saver.aput(carry_lease(head, lease), empty_checkpoint(), {"step": 1}, {})
            _move_on(kind, target, "checkpoint", "t")
            with pytest.raises(StorageError, match="fencing token moved on"):
                await saver.aput(carry_lease(head, lease), empty_checkpoint(), {"step": 2}, {})
        async with athread_lease(await saver.alease_target(), "t", scope="checkpoint") as lease:
            _move_on(kind, target, "checkpoint", "t")
            with pytest.raises(StorageError, match="fencing token moved on"):
                await saver.aput_writes(carry_lease(first, lease), [("x", 1)], "task")
        tup = await saver.aget_tuple(head)
        assert tup is not None and tup.metadata["step"] == 1 and tup.pending_writes == []
