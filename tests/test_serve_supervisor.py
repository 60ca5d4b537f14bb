"""The supervisor of ``remem serve --workers N`` sees a worker die during a health check at once.

uvicorn's supervisor kept its own copy of each worker's end of the health-check pipe, so a worker
SIGKILLed while a check waited on it was only noticed when the check timed out (60 s): no restart and
no signal handled meanwhile (seen: the worker-kill test of ``test_server_postgres`` took 65 s)."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

pytest.importorskip("uvicorn")


def test_a_worker_killed_during_a_health_check_ends_the_check_pipe() -> None:
    import uvicorn

    from remem.cli._supervisor import Worker
    from tests.server_process import never_answers

    worker = Worker(uvicorn.Config("remem.cli.serve:app_from_environment", factory=True), [])
    # the worker's process, made to hold its end of the pipe and never answer a check
    worker.process = multiprocessing.get_context("spawn").Process(
        target=never_answers, args=(worker.child_conn,)
    )
    worker.start()
    try:
        worker.parent_conn.send(b"ping")  # a check under way
        assert not worker.parent_conn.poll(0)  # unanswered while the worker lives
    finally:
        os.kill(worker.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        worker.process.join(30)
    assert worker.parent_conn.poll(0)  # the pipe ended with the worker: the check is over, not waiting
    assert worker.ping(timeout=3600) is False  # and it says dead without waiting out its timeout
