"""What the job queue's crash tests run in child processes: a worker whose handler records its effects.

Children start from a forkserver that has this module (remem, psycopg) imported already. Each child
appends what it did to its own log file, one line at a time, flushed, so a SIGKILL loses none of it:
``start ID`` when a handler begins, ``effect ID`` once its effect is written, ``done ID`` once the queue
accepted the completion. The effect is a row keyed by the job's id (written once, however many runs).
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from remem.jobs import Job, Worker, open_queue

KIND = "test.effect"
_CONTEXT: Any = None


def context() -> Any:
    """The multiprocessing context the tests start children with (a preloaded forkserver)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["tests.jobs_workers"])
    return _CONTEXT


def _effects(url: str) -> Any:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None, timeout=30)
        conn.execute("CREATE TABLE IF NOT EXISTS test_effects (job_id TEXT PRIMARY KEY, n INTEGER)")
        return conn
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS test_effects (job_id TEXT PRIMARY KEY, n INTEGER)")
    return conn


def effects(url: str) -> dict[str, int]:
    """The effect rows: job id to its payload's number."""
    conn = _effects(url)
    try:
        return {str(k): int(n) for k, n in conn.execute("SELECT job_id, n FROM test_effects").fetchall()}
    finally:
        conn.close()


def worker_main(url: str, log: str, block: str | None, lease: float, pause: float) -> None:
    """Run jobs until killed. ``block``: ``"start"`` or ``"effect"``: hang at that point of the first job
    (the test kills the process there); ``pause``: seconds each handler takes before its effect."""
    conn = _effects(url)
    out = open(log, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - kept open until the kill
    blocked = [False]
    placeholder = "?" if url.startswith("sqlite:///") else "%s"

    def line(text: str) -> None:
        out.write(f"{text} {time.time():.6f}\n")  # one machine: the processes' clocks agree
        out.flush()
        os.fsync(out.fileno())

    def handler(job: Job) -> None:
        line(f"start {job.id}")
        if block == "start" and not blocked[0]:
            blocked[0] = True
            time.sleep(3600)
        time.sleep(pause)
        conn.execute(
            f"INSERT INTO test_effects (job_id, n) VALUES ({placeholder}, {placeholder}) "
            "ON CONFLICT (job_id) DO NOTHING",
            (job.id, int(job.payload["n"])),
        )
        line(f"effect {job.id}")
        if block == "effect" and not blocked[0]:
            blocked[0] = True
            time.sleep(3600)

    def on_done(job: Job, outcome: str) -> None:
        line(f"{outcome} {job.id}")

    queue = open_queue(url)
    Worker(queue, {KIND: handler}, lease=lease, poll=0.05, on_done=on_done).run()


def start(url: str, log: Path, *, block: str | None = None, lease: float = 0.5, pause: float = 0.0) -> Any:
    process = context().Process(target=worker_main, args=(url, str(log), block, lease, pause), daemon=True)
    process.start()
    return process


def read_timed(folder: Path) -> list[tuple[float, str, str]]:
    """Every (time, event, job id) line the workers logged, in time order."""
    found = []
    for path in sorted(folder.glob("worker-*.log")):
        for text in path.read_text(encoding="utf-8").splitlines():
            parts = text.split(" ")
            if len(parts) == 3:  # a line cut by the kill has no time yet
                found.append((float(parts[2]), parts[0], parts[1]))
    return sorted(found)


def read_logs(folder: Path) -> list[tuple[str, str]]:
    """Every (event, job id) line the workers logged."""
    return [(event, job_id) for _, event, job_id in read_timed(folder)]


def wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
