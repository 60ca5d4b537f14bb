"""A lease lost while it is held never loses an acknowledged write; a lease file costs no descriptor left open.

The memory client's append reads the thread, then writes it. Here the lease is lost between the two, the
way a real deployment loses it: PostgreSQL ends the lease's session (``pg_terminate_backend``, as a server
restart or ``idle_session_timeout`` would), a SQLite lease file is deleted, or another descriptor of the
lease file is closed by the same process (a backup copying the folder). Meanwhile a second process appends
to the same thread. Whatever happens, every append that was acknowledged is in ``messages()``; an append
that could not be made safely fails with a clear :class:`~remem.errors.StorageError`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp

from remem import Memory, Settings
from remem._lease import thread_lease
from remem.errors import StorageError
from remem.memory._records import order_ns
from tests.lease_workers import THREAD, append_worker, context

SETTINGS = Settings(embedder="fake")


def _terminate_lease_sessions(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'remem-lease' AND datname = current_database()"
        ).fetchall()
    return len(rows)


def _between_read_and_write(memory: Memory, attack: Callable[[], None]) -> None:
    """Run ``attack`` once, when the next append has read the thread and not written it yet."""
    store = memory.store
    real, real_reading = store.batch, store.reading
    armed = [True]

    def hooked(run: Callable[[Any], Any], ops: Any) -> Any:
        ops = list(ops)
        result = run(ops)
        reads_order = len(ops) == 1 and isinstance(ops[0], GetOp) and ops[0].namespace == order_ns(THREAD)
        if armed[0] and reads_order:  # _append_new's last read: the order chunk it will rewrite
            armed[0] = False
            attack()
        return result

    @contextlib.contextmanager
    def reading() -> Iterator[Any]:  # the reads of a read session (PostgreSQL) as those of a batch
        with real_reading() as reads:
            yield lambda ops: hooked(reads, ops)

    store.batch = lambda ops: hooked(real, ops)  # type: ignore[method-assign]
    store.reading = reading  # type: ignore[method-assign]


def _other_process_appends(url: str, acks: Path, wait: float) -> Any:
    """Start a second process appending one message; wait for it up to ``wait`` seconds."""
    child = context().Process(target=append_worker, args=(url, 9, 1, str(acks)))
    child.start()
    child.join(wait)
    return child


def _acknowledged(acks: Path) -> list[str]:
    if not acks.exists():
        return []
    return [r["id"] for r in map(json.loads, acks.read_text().splitlines()) if "id" in r]


def _check_nothing_acknowledged_lost(url: str, acks: Path, mine: str, outcome: str) -> list[str]:
    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = memory.get_thread(THREAD)
        stored = [m.id for m in thread.messages()]
        info = thread.info()
    acked = ["first", *_acknowledged(acks), *([mine] if outcome == "acknowledged" else [])]
    assert [i for i in acked if i not in stored] == [], (outcome, stored)
    assert info.message_count == len(stored) and len(set(stored)) == len(stored)
    return stored


def _append_under_attack(url: str, attack: Callable[[], None]) -> str:
    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = memory.thread(THREAD, user_id="maya")
        thread.add_messages([{"role": "user", "content": "first", "id": "first"}])
        _between_read_and_write(memory, attack)
        try:
            thread.add_messages([{"role": "assistant", "content": "mine", "id": "mine"}])
        except StorageError as exc:
            assert "was lost" in str(exc) and "This write was not made" in str(exc)
            return "refused"
    return "acknowledged"


@pytest.mark.postgres
def test_an_append_whose_postgres_lease_session_ended_loses_no_acknowledged_message(
    pg_url: str, tmp_path: Path
) -> None:
    acks = tmp_path / "acks.txt"
    children: list[Any] = []

    def attack() -> None:
        assert _terminate_lease_sessions(pg_url) >= 1  # this append's lease session among them
        children.append(_other_process_appends(pg_url, acks, 60))
        assert children[0].exitcode == 0  # it took the lease this append still believes it holds

    outcome = _append_under_attack(pg_url, attack)
    assert _acknowledged(acks) == ["w9-m0"]
    stored = _check_nothing_acknowledged_lost(pg_url, acks, "mine", outcome)
    assert outcome == "refused" and stored == ["first", "w9-m0"]


def test_an_append_whose_sqlite_lease_file_was_deleted_loses_no_acknowledged_message(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    url = f"sqlite:///{path}"
    acks = tmp_path / "acks.txt"

    def attack() -> None:
        os.unlink(f"{path}-lease")
        child = _other_process_appends(url, acks, 60)  # it makes a new lease file and locks it there
        assert child.exitcode == 0

    outcome = _append_under_attack(url, attack)
    assert _acknowledged(acks) == ["w9-m0"]
    stored = _check_nothing_acknowledged_lost(url, acks, "mine", outcome)
    assert outcome == "refused" and stored == ["first", "w9-m0"]


def test_closing_another_descriptor_of_the_lease_file_keeps_the_lease(tmp_path: Path) -> None:
    """A POSIX lock is dropped when its process closes any descriptor of the file: a backup reading the
    folder would let a second writer in. The lease outlives such a close; the second writer waits."""
    path = tmp_path / "memory.db"
    url = f"sqlite:///{path}"
    acks = tmp_path / "acks.txt"
    children: list[Any] = []

    def attack() -> None:
        os.close(os.open(f"{path}-lease", os.O_RDONLY))  # what copying the folder does
        children.append(_other_process_appends(url, acks, 3))
        # still waiting for the lease this append holds (before the fix it was in and done)

    outcome = _append_under_attack(url, attack)
    children[0].join(60)
    assert children[0].exitcode == 0
    stored = _check_nothing_acknowledged_lost(url, acks, "mine", outcome)
    assert outcome == "acknowledged" and stored == ["first", "mine", "w9-m0"]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors through /proc")
def test_a_lease_keeps_no_descriptor_open_once_given_back(tmp_path: Path) -> None:
    """One descriptor was kept per SQLite database a process ever took a lease in (after about a thousand
    databases the next open failed): the lease file is now closed when no lease of it is held.

    Taking a lease also writes its fencing token through a connection of its own, which a store of
    ``from_conn_string`` keeps open between leases (its file and its WAL: two descriptors per open
    database); the store's close gives them back."""
    from remem.store import SqliteStore

    start = _open_descriptors()
    with contextlib.ExitStack() as stack:
        stores = [
            stack.enter_context(SqliteStore.from_conn_string(tmp_path / f"db{i}.db")) for i in range(40)
        ]
        before = _open_descriptors()
        for _ in range(3):
            for store in stores:
                with thread_lease(store.lease_target, "t", scope="memory", timeout=5) as lease:
                    lease.verify()
        assert _open_descriptors() - before <= 2 * len(stores) + 2
    assert _open_descriptors() - start <= 2
