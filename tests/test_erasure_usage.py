"""``forget`` erases the usage ledger too: the user's calls and the erased threads' calls, with the running
totals of those scopes, in the same journalled erasure; other users' rows and totals stay, and the totals
that the erased rows shared with others are summed again from what stays."""

from __future__ import annotations

import signal
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from remem import Memory, Settings
from remem.erasure import erase, finish_erasures, unfinished_erasures
from remem.errors import StorageError
from remem.usage import UsageEvent, open_ledger, read_ledger
from remem.usage._sql import TOTALS_TABLE
from tests.test_erasure_crash import Seeded, remem_forget, seed, sqlite_bytes

ALICE_THREADS = {"t-alice", "agent-7", "support-alice-1"}
DAY = 86400.0


def add_calls(url: str) -> None:
    """Calls beside the agents' own: Alice's embedder call (no thread), both users in a shared thread that
    survives Alice's erasure, and Alice on another day."""
    now = time.time()
    with open_ledger(url) as ledger:
        for event in (
            UsageEvent("embedder", "fake", 9, 0, user_id="alice", cost=0.5),
            UsageEvent("chat", "m", 10, 2, thread_id="t-shared", user_id="alice", turn=1, cost=1.0),
            UsageEvent("chat", "m", 20, 3, thread_id="t-shared", user_id="bob", turn=1, cost=2.0),
            UsageEvent("chat", "m", 30, 4, thread_id="t-shared", user_id="bob", turn=2, cost=4.0),
            UsageEvent("chat", "m", 5, 1, thread_id="t-alice", user_id="alice", turn=7, at=now - DAY),
        ):
            ledger.record(event)


def alices(event: UsageEvent) -> bool:
    return event.user_id == "alice" or event.thread_id in ALICE_THREADS


def totals_rows(url: str) -> list[tuple[Any, ...]]:
    with open_ledger(url) as ledger:
        return sorted(ledger._read(f"SELECT scope, key1, key2, calls FROM {TOTALS_TABLE}", ()))


def assert_totals_match_rows(url: str) -> None:
    """Every running total is what the ledger's rows sum to, and every scope with rows has one."""
    with open_ledger(url) as ledger:
        events = ledger.events()
    summed: dict[tuple[str, str, str], int] = {}
    for e in events:
        keys = [("user_day", e.user_id, e.day)] if e.user_id is not None else []
        if e.thread_id is not None:
            keys.append(("thread", e.thread_id, ""))
            if e.turn is not None:
                keys.append(("turn", e.thread_id, str(e.turn)))
        for key in keys:
            summed[key] = summed.get(key, 0) + 1
    assert {(s, k1, k2): n for s, k1, k2, n in totals_rows(url)} == summed


def seeded_with_calls(url: str) -> tuple[Seeded, list[UsageEvent]]:
    seeded = seed(url)
    add_calls(url)
    with open_ledger(url) as ledger:
        events = ledger.events()
    assert sum(alices(e) for e in events) >= 5 and any(not alices(e) for e in events)
    return seeded, events


def check_ledger(url: str, before: list[UsageEvent], removed: int) -> None:
    """None of Alice's calls or her threads' stay; Bob's do, and every running total matches the rows."""
    with open_ledger(url) as ledger:
        after = ledger.events()
        assert [e for e in after if alices(e)] == []
        assert after == [e for e in before if not alices(e)]
        assert removed == len(before) - len(after) > 0
        assert ledger.spent(thread_id="t-bob").calls == 1
        assert ledger.spent(thread_id="t-shared").calls == 2  # Alice's call in it left its totals
        assert ledger.spent(thread_id="t-shared", turn=1).calls == 1
        assert ledger.spent(thread_id="t-alice").calls == 0 and ledger.user_day("alice").calls == 0
        assert ledger.user_day("bob").calls == 3
    assert_totals_match_rows(url)
    keys = {row[1] for row in totals_rows(url)}
    assert "alice" not in keys and not keys & ALICE_THREADS
    assert {"bob", "t-bob", "t-shared"} <= keys


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'remem.db'}"


def test_forget_user_erases_their_ledger_rows_and_totals_on_sqlite(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    _, before = seeded_with_calls(url)

    report = erase(url, user_id="alice")

    check_ledger(url, before, report.usage_rows)
    assert ("usage ledger rows", str(report.usage_rows)) in report.as_rows()


@pytest.mark.postgres
def test_forget_user_erases_their_ledger_rows_and_totals_on_postgres(pg_url: str) -> None:
    _, before = seeded_with_calls(pg_url)

    report = erase(pg_url, user_id="alice")

    check_ledger(pg_url, before, report.usage_rows)


def test_forget_thread_erases_its_calls_and_sums_the_users_days_again(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    seeded_with_calls(url)

    report = erase(url, thread_id="t-shared")

    assert report.usage_rows == 3
    with open_ledger(url) as ledger:
        assert ledger.events(thread_id="t-shared") == []
        assert ledger.spent(thread_id="t-shared").calls == 0
        assert ledger.user_day("bob").calls == 1  # t-bob's call; the shared thread's two are gone
        assert ledger.user_day("alice").calls == 2  # today: her agent-7 turn and her embedder call
    assert_totals_match_rows(url)
    assert all(row[1] != "t-shared" for row in totals_rows(url))


def test_a_database_without_a_ledger_is_erased_as_before_and_gets_none(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    memory = Memory.from_url(url, settings=Settings(embedder="fake"))
    try:
        memory.thread("t-alice", user_id="alice").add_messages([{"role": "user", "content": "hello"}])
    finally:
        memory.close()

    report = erase(url, user_id="alice")

    assert report.store.items > 0 and report.usage_rows == 0 and report.compacted
    with read_ledger(url) as ledger:
        assert ledger is None  # nothing created
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        assert conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'remem_usage%'"
        ).fetchone() == (0,)
    finally:
        conn.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_killed_before_the_ledger_step_then_a_rerun_finishes_it(
    backend: str, tmp_path: Path, request: Any
) -> None:
    url = _sqlite(tmp_path) if backend == "sqlite" else request.getfixturevalue("pg_url")
    _, before = seeded_with_calls(url)
    # "checkpoints" is reached once the checkpoints are gone and before the ledger step.
    killed = remem_forget("--user", "alice", "--db", url, "--yes", point="checkpoints", action="kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with open_ledger(url) as ledger:
        assert any(alices(e) for e in ledger.events())  # the ledger step had not run

    [report] = finish_erasures(url)

    assert report.runs == 2
    check_ledger(url, before, report.usage_rows)
    assert unfinished_erasures(url) == 0


def test_a_failure_before_the_ledger_step_leaves_it_open_then_erase_again_finishes(tmp_path: Path) -> None:
    import remem.erasure
    import remem.errors

    url = _sqlite(tmp_path)
    _, before = seeded_with_calls(url)

    def fail(step: str) -> None:
        if step == "checkpoints":
            raise StorageError("the disk went away")

    remem.erasure._on_step = fail
    try:
        with pytest.raises(remem.errors.ErasureIncompleteError):
            erase(url, user_id="alice")
    finally:
        remem.erasure._on_step = None
    assert unfinished_erasures(url) == 1

    report = erase(url, user_id="alice")

    check_ledger(url, before, report.usage_rows)
    assert erase(url, user_id="alice").usage_rows == 0  # counted once, never twice


def test_a_user_known_only_to_the_ledger_leaves_no_bytes_in_the_sqlite_file(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    seeded_with_calls(url)
    user, thread = "Zu" + uuid.uuid4().hex, "Zt" + uuid.uuid4().hex
    with open_ledger(url) as ledger:
        ledger.record(UsageEvent("chat", "m", 1, 1, thread_id=thread, user_id=user, turn=1))
    assert user.encode() in sqlite_bytes(url)

    report = erase(url, user_id=user)

    assert report.removed == report.usage_rows == 1 and report.compacted
    data = sqlite_bytes(url)
    assert user.encode() not in data and thread.encode() not in data
    assert_totals_match_rows(url)
