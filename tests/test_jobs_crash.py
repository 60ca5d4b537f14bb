"""The job queue with real worker processes killed (SIGKILL) mid-job: no job is lost, none completes twice.

Kills at chosen points first (while a handler runs; after its effect, before the completion), then at
random moments among several workers at once; on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import collections
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remem.jobs import open_queue
from remem.layout import JOBS_TABLE
from tests import jobs_workers as jw


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """One fresh PostgreSQL database for this module (creating one per test costs seconds)."""
    from tests.conftest import POSTGRES_URL, _fresh_database

    yield from _fresh_database(POSTGRES_URL)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    url: str = request.getfixturevalue("module_pg_url")
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:  # shared by the module's tests: emptied
        conn.execute("DROP TABLE IF EXISTS test_effects")
        conn.execute(f"DROP TABLE IF EXISTS {JOBS_TABLE}")
        conn.execute("DROP TABLE IF EXISTS remem_schema")
    return url


def _kill(process: Any) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)


def _done(url: str) -> int:
    with open_queue(url) as queue:
        return queue.status().total("done")


def _check_every_job_done_once(
    url: str, ids: list[str], folder: Path, *, logged_once: bool = True
) -> collections.Counter[tuple[str, str]]:
    """Every job done in the database, its effect written once, its completion accepted once (in the logs:
    exactly once, or, when a worker may have died between the completion and its log line, at most once)."""
    with open_queue(url) as queue:
        statuses = {job.id: job.status for job in queue.jobs(limit=1000)}
    assert {i: statuses[i] for i in ids} == dict.fromkeys(ids, "done")  # no job lost, none parked
    events = collections.Counter(jw.read_logs(folder))
    assert all(events[("done", i)] == 1 if logged_once else events[("done", i)] <= 1 for i in ids), events
    assert not [e for e in events if e[0] == "lost"], events
    effects = jw.effects(url)
    assert sorted(effects) == sorted(ids)  # one effect per job, whatever the number of runs
    return events


def test_a_worker_killed_at_chosen_points_loses_no_job_and_completes_none_twice(
    queue_url: str, tmp_path: Path
) -> None:
    with open_queue(queue_url) as queue:
        ids = [queue.enqueue(jw.KIND, {"n": n}) for n in range(4)]
    jw.effects(queue_url)  # the effect table exists before the children race to create it
    logs = collections.Counter[tuple[str, str]]

    # 1. Killed while its handler runs (the effect not written yet).
    first = jw.start(queue_url, tmp_path / "worker-1.log", block="start")
    jw.wait_for(lambda: any(e == "start" for e, _ in jw.read_logs(tmp_path)), "the first handler to start")
    _kill(first)
    (started,) = [i for e, i in jw.read_logs(tmp_path) if e == "start"]
    # 2. Killed after the effect, before the queue heard of it: the job runs again, its effect stays one row.
    second = jw.start(queue_url, tmp_path / "worker-2.log", block="effect")
    jw.wait_for(lambda: any(e == "effect" for e, _ in jw.read_logs(tmp_path)), "an effect")
    _kill(second)
    (effected,) = [i for e, i in jw.read_logs(tmp_path) if e == "effect"]
    with open_queue(queue_url) as queue:
        assert {queue.get(started).status, queue.get(effected).status} == {"running"}  # claims left behind
    # 3. A healthy worker takes both again once their leases expire, and runs the rest.
    third = jw.start(queue_url, tmp_path / "worker-3.log")
    try:
        jw.wait_for(lambda: sum(e == "done" for e, _ in jw.read_logs(tmp_path)) == len(ids), "every job done")
    finally:
        _kill(third)
    events: logs = _check_every_job_done_once(queue_url, ids, tmp_path)
    assert events[("start", started)] >= 2 and events[("start", effected)] >= 2  # they did run again
    with open_queue(queue_url) as queue:
        assert queue.get(started).attempts == events[("start", started)]  # each run counted as an attempt


def test_workers_killed_at_random_moments_lose_no_job_and_complete_none_twice(
    queue_url: str, tmp_path: Path
) -> None:
    rng = random.Random(21)
    with open_queue(queue_url) as queue:  # jobs in pairs that share a serial key (a thread's jobs)
        ids = [queue.enqueue(jw.KIND, {"n": n}, serial_key=f"thread-{n // 2}") for n in range(8)]
    jw.effects(queue_url)
    workers: dict[Path, Any] = {}

    def spawn() -> None:
        log = tmp_path / f"worker-{len(workers) + 1}.log"
        workers[log] = jw.start(queue_url, log, pause=0.05)

    def busy() -> list[Path]:
        """The logs of the live workers whose last line is a start: their handler is running."""
        return [
            log
            for log, p in workers.items()
            if p.is_alive()
            and log.exists()
            and log.read_text().splitlines()[-1:] != []
            and log.read_text().splitlines()[-1].startswith("start")
        ]

    for _ in range(3):
        spawn()
    try:
        for _ in range(3):  # kill a worker whose handler runs, after a random delay, and start another
            jw.wait_for(lambda: bool(busy()), "a handler to run")
            jw.wait_for(lambda: rng.random() < 0.3, "a random moment")
            running = busy()
            if running:
                _kill(workers[rng.choice(running)])
            spawn()
        jw.wait_for(lambda: _done(queue_url) >= len(ids), "every job done")
    finally:
        for process in workers.values():
            if process.is_alive():
                _kill(process)
    events = _check_every_job_done_once(queue_url, ids, tmp_path, logged_once=False)
    assert sum(events[("start", i)] for i in ids) > len(ids)  # some job ran again after a kill
    timed = jw.read_timed(tmp_path)
    with open_queue(queue_url) as queue:  # the database's clock and the workers' are this machine's
        finished = {i: queue.get(i).finished_at for i in ids}
    for first, second in zip(ids[::2], ids[1::2], strict=True):  # a thread's second job waits for its first
        assert finished[first] is not None
        assert finished[first] <= min(t for t, e, i in timed if (e, i) == ("start", second))
