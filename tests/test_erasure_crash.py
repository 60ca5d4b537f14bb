"""An erasure always finishes: a real process killed at each step, or stopped by a full disk during
compaction, leaves a journal entry that the next run finishes, reporting the totals of the whole erasure.

The kills are placed with ``remem.erasure._on_step`` in a child process running the real ``remem forget``.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from remem import Memory, ScriptedChatModel, Settings, build_agent, checkpointer_from_url, list_threads
from remem.erasure import ErasureReport, erase, finish_erasures, register_user_data, unfinished_erasures
from remem.errors import ErasureIncompleteError
from remem.store import open_store

_CHILD = textwrap.dedent(
    """
    import os, resource, signal, sys
    import remem.erasure
    from remem.cli import main

    point, action, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def hook(step):
        if step != point:
            return
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "disk-full":
            # A write past the limit then fails with EFBIG, as on a full disk (and does not kill us).
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    remem.erasure._on_step = hook
    print("start", flush=True)
    main(sys.argv[4:], prog_name="remem")
    """
)


def remem_forget(*args: str, point: str = "none", action: str = "none", limit: int = 0) -> Any:
    """``remem forget ARGS`` in a child process, with ``action`` done when the erasure reaches ``point``."""
    return subprocess.run(
        [sys.executable, "-c", _CHILD, point, action, str(limit), "forget", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class Seeded:
    url: str
    secret: str  # alice's: must leave no byte
    other: str  # bob's: must stay
    items: int
    checkpoints: dict[str, int]


def _turn(saver: Any, thread: str, text: str, user: str | None = None) -> None:
    agent = build_agent(ScriptedChatModel(default="noted"), strategy="filter", checkpointer=saver)
    configurable = {"thread_id": thread, **({"user_id": user} if user else {})}
    agent.invoke({"messages": [{"role": "user", "content": text}]}, {"configurable": configurable})


def checkpoint_counts(saver: Any) -> dict[str, int]:
    return {t.thread_id: t.checkpoints for t in saver.stats().threads}


def seed(url: str) -> Seeded:
    """Alice's data in every place an erasure must reach, and Bob's next to it."""
    secret, other = "Zq" + uuid.uuid4().hex, "Zb" + uuid.uuid4().hex
    memory = Memory.from_url(url, settings=Settings(embedder="fake"))
    try:
        memory.thread("t-alice", user_id="alice").add_messages(
            [{"role": "user", "content": f"code {secret}"}]
        )
        memory.thread("t-bob", user_id="bob").add_messages([{"role": "user", "content": f"code {other}"}])
    finally:
        memory.close()
    with checkpointer_from_url(url) as saver:
        _turn(saver, "t-alice", f"my code is {secret}")  # the memory client registered it for alice
        _turn(saver, "agent-7", f"my code is {secret}", user="alice")  # metadata names alice
        _turn(saver, "support-alice-1", f"my code is {secret}")  # a registered thread pattern
        _turn(saver, "t-bob", f"my code is {other}", user="bob")
        stats = checkpoint_counts(saver)
    with open_store(url) as store:
        store.put(("crm", "alice"), "card", {"text": f"alice's card {secret}"})
        store.put(("crm", "bob"), "card", {"text": f"bob's card {other}"})
        items = store.stats()["items"]
    register_user_data(url, namespaces=["crm.{user_id}"], threads=["support-{user_id}-*"])
    return Seeded(url, secret, other, items, stats)


def sqlite_bytes(url: str) -> bytes:
    path = Path(url.removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def check_finished(seeded: Seeded, report: ErasureReport) -> None:
    """Alice is gone everywhere, Bob is whole, and the report counts the whole erasure."""
    alice_threads = ["agent-7", "support-alice-1", "t-alice"]
    with checkpointer_from_url(seeded.url) as saver:
        assert list_threads(saver) == ["t-bob"]
        left = checkpoint_counts(saver)
    assert left == {"t-bob": seeded.checkpoints["t-bob"]}
    with open_store(seeded.url) as store:
        items_after = store.stats()["items"]
        assert store.get(("crm", "bob"), "card") is not None and store.get(("crm", "alice"), "card") is None
        assert store.search(("threads", "t-bob"), query=seeded.other)
    assert report.store.items == seeded.items - items_after > 0
    assert report.threads == 3 and report.checkpoints == sum(seeded.checkpoints[t] for t in alice_threads)
    assert report.registered_namespaces in ([], ["crm.alice"])  # names are dropped once deleted
    assert report.compacted
    assert unfinished_erasures(seeded.url) == 0
    if seeded.url.startswith("sqlite"):
        data = sqlite_bytes(seeded.url)
        assert seeded.secret.encode() not in data and seeded.secret.lower().encode() not in data
        assert seeded.other.encode() in data or seeded.other.lower().encode() in data


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'remem.db'}"


POINTS = ["planned", "store", "checkpoints", "compacting"]


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_step_then_forget_again_finishes_it(point: str, tmp_path: Path) -> None:
    seeded = seed(_sqlite(tmp_path))
    killed = remem_forget("--user", "alice", "--db", seeded.url, "--yes", point=point, action="kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert unfinished_erasures(seeded.url) == 1
    if point == "store":  # between the halves: the store is done, the checkpoints are still there
        with checkpointer_from_url(seeded.url) as saver:
            assert "agent-7" in list_threads(saver)

    [report] = finish_erasures(seeded.url)  # what `remem forget` with no scope does

    check_finished(seeded, report)
    assert report.runs == 2


def test_the_same_command_again_finishes_it_and_prints_the_totals(tmp_path: Path) -> None:
    seeded = seed(_sqlite(tmp_path))
    args = ("--user", "alice", "--db", seeded.url, "--yes")
    assert remem_forget(*args, point="store", action="kill").returncode == -signal.SIGKILL

    again = remem_forget(*args)

    assert again.returncode == 0, again.stderr
    assert "runs it took" in again.stdout and "agent-7" in again.stdout and "yes: VACUUM" in again.stdout
    with checkpointer_from_url(seeded.url) as saver:
        assert list_threads(saver) == ["t-bob"]
    assert seeded.secret.encode() not in sqlite_bytes(seeded.url)
    nothing = remem_forget(*args)  # it is all gone now: a third run finds nothing and says so
    assert nothing.returncode != 0 and "nothing was stored for user alice" in nothing.stderr


def test_a_full_disk_during_compaction_leaves_it_open_then_a_rerun_finishes(tmp_path: Path) -> None:
    seeded = seed(_sqlite(tmp_path))
    size = Path(seeded.url.removeprefix("sqlite:///")).stat().st_size
    full = remem_forget(
        "--user",
        "alice",
        "--db",
        seeded.url,
        "--yes",
        point="compacting",
        action="disk-full",
        limit=size // 4,
    )
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr and "stays open" in full.stderr
    assert "NO:" in full.stdout  # the partial report does not claim a compaction
    assert unfinished_erasures(seeded.url) == 1

    plain = remem_forget("--db", seeded.url)

    assert plain.returncode == 0, plain.stderr
    assert "finished erasure" in plain.stdout
    assert seeded.secret.encode() not in sqlite_bytes(seeded.url)
    with checkpointer_from_url(seeded.url) as saver:
        assert list_threads(saver) == ["t-bob"]


def test_a_reader_holding_a_transaction_is_waited_for(tmp_path: Path) -> None:
    seeded = seed(_sqlite(tmp_path))
    path = seeded.url.removeprefix("sqlite:///")
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM remem_items').fetchone()\n"
            "print('reading', flush=True); time.sleep(1.5); c.execute('COMMIT')\n",
            path,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        done = remem_forget("--user", "alice", "--db", seeded.url, "--yes", "--wait", "60")
    finally:
        reader.wait(30)
    assert done.returncode == 0, done.stderr
    assert seeded.secret.encode() not in sqlite_bytes(seeded.url)


def test_a_reader_that_stays_is_reported_and_the_erasure_stays_open(tmp_path: Path) -> None:
    seeded = seed(_sqlite(tmp_path))
    reader = sqlite3.connect(seeded.url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT value FROM remem_items").fetchall()  # a snapshot from before the erasure
        with pytest.raises(ErasureIncompleteError, match="holds a read transaction") as stopped:
            erase(seeded.url, user_id="alice", wait=0.3)
        partial = stopped.value.report
        assert isinstance(partial, ErasureReport) and not partial.compacted and partial.store.items > 0
        assert unfinished_erasures(seeded.url) == 1
        reader.execute("COMMIT")
    finally:
        reader.close()

    [report] = finish_erasures(seeded.url, wait=5)

    check_finished(seeded, report)


def test_random_kills_then_a_rerun_finishes(tmp_path: Path) -> None:
    seeded = seed(_sqlite(tmp_path))
    delays = random.Random(8).sample([0.05 * i for i in range(1, 20)], 3)  # fixed draws: reproducible
    args = ["--user", "alice", "--db", seeded.url, "--yes"]
    for delay in delays:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, "none", "none", "0", "forget", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "start"
        time.sleep(delay)  # somewhere inside the erasure (or after it)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)

    # A kill before the journal's entry was written left nothing started (a loaded machine may kill all
    # three that early): then the next erasure does it all. An entry a kill left open is finished here.
    left_open = unfinished_erasures(seeded.url)
    finish_erasures(seeded.url)

    removed = erase(seeded.url, user_id="alice").removed
    assert removed == 0 or not left_open  # whatever the kills left, it is all done
    with checkpointer_from_url(seeded.url) as saver:
        assert list_threads(saver) == ["t-bob"]
    with open_store(seeded.url) as store:
        assert store.get(("crm", "alice"), "card") is None and store.get(("crm", "bob"), "card") is not None
    assert seeded.secret.encode() not in sqlite_bytes(seeded.url)
    assert unfinished_erasures(seeded.url) == 0


def journal_totals(url: str) -> dict[str, int]:
    """The totals of every closed erasure in the journal, summed (runs left out)."""
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        rows = conn.execute("SELECT totals FROM remem_erasures WHERE state = 'closed'").fetchall()
    finally:
        conn.close()
    summed: dict[str, int] = {}
    for (totals,) in rows:
        for key, value in json.loads(totals).items():
            if key != "runs":
                summed[key] = summed.get(key, 0) + value
    return {k: v for k, v in summed.items() if v}


def test_two_runs_of_one_erasure_never_count_twice(tmp_path: Path) -> None:
    import remem.erasure

    seeded = seed(_sqlite(tmp_path))
    assert (
        remem_forget(
            "--user", "alice", "--db", seeded.url, "--yes", point="planned", action="kill"
        ).returncode
        < 0
    )

    def another_process_finishes_it(step: str) -> None:
        if step == "planned":
            other = remem_forget("--db", seeded.url)
            assert other.returncode == 0, other.stderr

    remem.erasure._on_step = another_process_finishes_it
    try:
        with pytest.raises(ErasureIncompleteError, match="another run of forget"):
            finish_erasures(seeded.url)  # it read the entry before the other process wrote it
    finally:
        remem.erasure._on_step = None

    with open_store(seeded.url) as store:
        items_after = store.stats()["items"]
    totals = journal_totals(seeded.url)
    assert totals["items"] == seeded.items - items_after and totals["threads"] == 3
    assert unfinished_erasures(seeded.url) == 0


@pytest.mark.postgres
@pytest.mark.parametrize("point", ["planned", "store"])
def test_sigkill_on_postgres_then_a_rerun_finishes(point: str, pg_url: str) -> None:
    seeded = seed(pg_url)
    killed = remem_forget("--user", "alice", "--db", pg_url, "--yes", point=point, action="kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert unfinished_erasures(pg_url) == 1

    [report] = finish_erasures(pg_url)

    check_finished(seeded, report)
    assert "WAL" in " ".join(report.outlives)


def test_kill_points_are_the_steps_erase_reaches(tmp_path: Path) -> None:
    import remem.erasure

    seeded = seed(_sqlite(tmp_path))
    reached: list[str] = []
    remem.erasure._on_step = reached.append
    try:
        remem.erasure.erase(seeded.url, user_id="alice")
    finally:
        remem.erasure._on_step = None
    assert [r for r in reached if r != "saved"] == POINTS  # every point the kill test names is crossed
