"""The durable job queue in one process: retries, parking, leases by the database's clock, one job per
input, a thread's jobs in order, erasure, the extraction node's jobs, and the ``remem queue`` commands.
(Real worker processes killed mid-job: tests/test_jobs_crash.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from remem._statements import Statement
from remem.cli import main
from remem.errors import ArgumentTypeError
from remem.extraction import MemoryExtractor, extraction_node
from remem.extraction.tools import EXTRACTION_JOB, enqueue_extraction, run_extraction_job
from remem.jobs import Backoff, Job, JobQueue, Worker, enqueue_summary_refresh, open_queue
from remem.layout import EXTRACTION_STATE_KEY, JOBS_TABLE, extraction_state, thread_messages, user_memories
from remem.store import SqliteStore
from remem.testing import FakeEmbedder, ScriptedChatModel


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """One fresh PostgreSQL database for this module (creating one per test costs seconds)."""
    from tests.conftest import POSTGRES_URL, _fresh_database

    yield from _fresh_database(POSTGRES_URL)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    found: str = request.getfixturevalue("module_pg_url")
    return found


@pytest.fixture
def queue(url: str) -> Iterator[JobQueue]:
    with open_queue(url) as q:
        q._run(_empty())  # the module's PostgreSQL database is shared by its tests
        yield q


def _empty() -> Any:
    yield Statement(f"DELETE FROM {JOBS_TABLE}", (), "none")


def _failing(job: Job) -> None:
    raise RuntimeError(f"the model endpoint refused job {job.payload['n']}")


def test_a_failing_job_is_retried_with_backoff_then_parked_with_its_error(queue: JobQueue) -> None:
    job_id = queue.enqueue("t", {"n": 7}, max_attempts=3)
    outcomes: list[str] = []
    worker = Worker(
        queue, {"t": _failing}, backoff=Backoff(base=0.0), on_done=lambda j, o: outcomes.append(o)
    )
    assert worker.run(until_empty=True) == 3
    assert outcomes == ["queued", "queued", "parked"]
    parked = queue.get(job_id)
    assert (parked.status, parked.attempts) == ("parked", 3)
    assert parked.last_error == "RuntimeError: the model endpoint refused job 7"
    assert parked.payload == {"n": 7}  # kept whole, to be retried
    assert queue.claim("someone") is None  # a parked job is never claimed
    assert queue.retry(job_id) == 1 and queue.get(job_id).status == "queued"
    assert Worker(queue, {"t": lambda j: None}).run(until_empty=True) == 1
    done = queue.get(job_id)
    assert (done.status, done.payload, done.last_error) == ("done", None, None)  # the user's text dropped


def test_the_backoff_delays_the_next_attempt_by_the_databases_clock(queue: JobQueue) -> None:
    job_id = queue.enqueue("t", {"n": 1})
    worker = Worker(queue, {"t": _failing}, backoff=Backoff(base=30.0))
    assert worker.run_once() is not None
    waiting = queue.get(job_id)
    assert waiting.status == "queued" and waiting.run_after - waiting.updated_at == pytest.approx(
        30.0, abs=0.5
    )
    assert worker.run_once() is None  # not due yet
    assert Backoff(base=2.0, factor=2.0, cap=10.0).delay(1) == 2.0
    assert [Backoff(base=2.0, cap=10.0).delay(n) for n in (2, 3, 4)] == [4.0, 8.0, 10.0]


def test_an_expired_lease_is_taken_again_and_the_first_holder_cannot_complete(
    queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = queue.enqueue("t", {"n": 1})
    first = queue.claim("a", lease=30.0)
    assert first is not None and first.id == job_id
    monkeypatch.setattr(time, "time", lambda: time.monotonic() + 1e6)  # a client clock far ahead: no effect
    assert queue.claim("b") is None
    monkeypatch.undo()
    assert queue.heartbeat(first, lease=-1.0)  # the lease now ends in the past, as a dead worker's does
    second = queue.claim("b")
    assert second is not None and second.id == job_id and second.attempts == 2
    assert not queue.complete(first) and not queue.heartbeat(first)  # the first holder lost it
    assert queue.fail(first, "late", delay=0) is None
    assert queue.complete(second) and queue.get(job_id).status == "done"
    assert not queue.complete(second)  # completes once


def test_a_job_whose_worker_keeps_dying_is_parked_not_run_forever(queue: JobQueue) -> None:
    job_id = queue.enqueue("t", {"n": 1}, max_attempts=2)
    for owner in ("a", "b"):
        claimed = queue.claim(owner, lease=-1.0)  # claimed, and its worker never beats: dead
        assert claimed is not None
    assert queue.claim("c") is None
    parked = queue.get(job_id)
    assert parked.status == "parked" and "its worker stopped" in (parked.last_error or "")


def test_the_same_input_is_queued_once_and_a_threads_jobs_run_in_order(queue: JobQueue) -> None:
    first = queue.enqueue("t", {"n": 1}, input_key="t1:m1", serial_key="t1")
    assert queue.enqueue("t", {"n": 1}, input_key="t1:m1", serial_key="t1") == first
    second = queue.enqueue("t", {"n": 2}, input_key="t1:m2", serial_key="t1")
    other = queue.enqueue("t", {"n": 3}, serial_key="t2")
    a = queue.claim("a")
    b = queue.claim("b")
    assert a is not None and b is not None and (a.id, b.id) == (first, other)
    assert queue.claim("c") is None  # t1's second job waits for its first
    assert queue.complete(a)
    c = queue.claim("c")
    assert c is not None and c.id == second
    assert queue.enqueue("t", {"n": 1}, input_key="t1:m1") == first  # done: the same input is not redone
    assert queue.status().counts == {"t": {"done": 1, "running": 2}}


def test_park_and_retry_by_hand(queue: JobQueue) -> None:
    one = queue.enqueue("extraction", {})
    queue.enqueue("extraction", {})
    keep = queue.enqueue("summary", {})
    assert queue.park(one, "poison input") == 1 and queue.get(one).last_error == "poison input"
    assert queue.park_kind("extraction", "endpoint down") == 1
    assert queue.status().total("parked") == 2 and queue.get(keep).status == "queued"
    assert queue.retry() == 2 and queue.status().total("queued") == 3


def test_workers_in_the_background_of_the_app_run_what_is_queued(queue: JobQueue) -> None:
    from remem.jobs import start_workers

    ran: list[int] = []
    with start_workers(
        queue, {"t": lambda job: ran.append(job.payload["n"])}, concurrency=2, poll=0.02
    ) as pool:
        for n in range(5):
            queue.enqueue("t", {"n": n})
        deadline = time.monotonic() + 30
        while queue.status().total("done") < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert sorted(ran) == [0, 1, 2, 3, 4] and pool.stop() == 5


def test_bad_arguments_are_refused_clearly(queue: JobQueue) -> None:
    with pytest.raises(ArgumentTypeError, match="JSON-ready"):
        queue.enqueue("t", {"when": object()})
    with pytest.raises(ArgumentTypeError, match="max_attempts"):
        queue.enqueue("t", {}, max_attempts=0)
    with pytest.raises(ArgumentTypeError, match="kind"):
        queue.enqueue("", {})


# ----------------------------------------------------------------------------- extraction through the queue


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _store(path: Path) -> Any:
    # the embedder of the workers' embedder="fake" (a store refuses another model than its vectors')
    index = {"dims": 64, "embed": FakeEmbedder(64), "fields": ["content"]}
    return SqliteStore.from_conn_string(path, index=index)


def test_the_extraction_node_queues_a_job_that_a_worker_runs(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    reply = json.dumps({"memories": [{"kind": "fact", "text": "The user sails."}]})
    with _store(path) as store, open_queue(f"sqlite:///{path}") as queue:
        extractor = MemoryExtractor(store, model=ScriptedChatModel(replies=[reply]))
        node = extraction_node(extractor, background=True, queue=queue)
        builder = StateGraph(_State)
        builder.add_node("reply", lambda state: {"messages": [AIMessage(content="Fun!", id="a-1")]})
        builder.add_node("extract", node)
        builder.add_edge(START, "reply")
        builder.add_edge("reply", "extract")
        graph = builder.compile(store=store)
        config = {"configurable": {"thread_id": "g1", "user_id": "u5"}}
        graph.invoke({"messages": [HumanMessage(content="I sail on weekends.", id="h-1")]}, config)
        assert store.search(user_memories("u5")) == []  # nothing ran in the turn: a job waits
        (job,) = queue.jobs()
        assert (job.kind, job.user_id, job.thread_id, job.status) == (EXTRACTION_JOB, "u5", "g1", "queued")
        handler = {EXTRACTION_JOB: lambda j: run_extraction_job(extractor, j.payload, job_id=j.id)}
        assert Worker(queue, handler).run(until_empty=True) == 1
        assert [i.value["content"] for i in store.search(user_memories("u5"))] == ["The user sails."]
        assert {i.key for i in store.search(thread_messages("g1"))} == {"h-1", "a-1"}
        # The same turn again (a replayed node) queues nothing new: the watermark has passed it.
        turn = [HumanMessage("I sail on weekends.", id="h-1"), AIMessage("Fun!", id="a-1")]
        assert enqueue_extraction(queue, turn, user_id="u5", thread_id="g1", store=store) is None


def test_an_extraction_job_run_twice_adds_each_memory_once(tmp_path: Path) -> None:
    reply = json.dumps({"memories": [{"kind": "fact", "text": "The user lives in Lisbon."}]})
    with _store(tmp_path / "x.db") as store:
        # The second run finds the first run's memory as a neighbour: the update step is asked too.
        replies = [reply, reply, json.dumps({"decisions": []})]
        extractor = MemoryExtractor(store, model=ScriptedChatModel(replies=replies))
        payload = {
            "thread_id": "t1",
            "user_id": "u1",
            "messages": [{"type": "human", "data": {"content": "I live in Lisbon.", "id": "m1"}}],
        }
        first = run_extraction_job(extractor, payload, job_id="job-1")
        # A crash after the memories were written and before the watermark: the job runs again.
        store.delete(extraction_state("t1"), EXTRACTION_STATE_KEY)
        second = run_extraction_job(extractor, payload, job_id="job-1")
        assert first.added == second.added and len(first.added) == 1
        assert [i.key for i in store.search(user_memories("u1"))] == first.added


# ----------------------------------------------------------------------------- erasure and the CLI


def test_erasing_a_user_removes_their_jobs_and_no_one_elses(tmp_path: Path) -> None:
    from remem import Memory, Settings
    from remem.erasure import erase

    url = f"sqlite:///{tmp_path / 'app.db'}"
    with Memory.from_url(url, settings=Settings(embedder="fake")) as memory:
        memory.thread("t-maya", user_id="maya").add_messages([{"role": "user", "content": "hi", "id": "m1"}])
    with open_queue(url) as queue:
        enqueue_summary_refresh(queue, "t-maya", user_id="maya")
        queue.enqueue("extraction", {"messages": ["maya's words"]}, user_id="maya", thread_id="t-maya")
        kept = queue.enqueue("extraction", {}, user_id="noor", thread_id="t-noor")
    erase(url, user_id="maya", wait=0)
    with open_queue(url) as queue:
        assert [j.id for j in queue.jobs()] == [kept]


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={"REMEM_EMBEDDER": "fake"})


def test_the_queue_commands(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with _store(tmp_path / "app.db"), open_queue(url) as queue:
        poison = queue.enqueue("extraction", {"bad": True}, max_attempts=1)
        enqueue_extraction(queue, [HumanMessage("I live in Porto.", id="p1")], user_id="u1", thread_id="t1")
    drained = _cli("queue", "drain", "--db", url)
    assert drained.exit_code == 1 and "2 job(s) ran" in drained.output and "1 parked" in drained.output
    status = _cli("queue", "status", "--db", url, "--json")
    data = json.loads(status.stdout)
    assert status.exit_code == 1 and data["totals"]["parked"] == 1 and data["totals"]["done"] == 1
    assert data["parked"][0]["id"] == poison and "KeyError" in data["parked"][0]["last_error"]
    table = _cli("queue", "status", "--db", url)
    assert poison in table.output and "parked jobs" in table.output
    assert _cli("queue", "retry", "--db", url).exit_code == 2  # an id or --all
    assert _cli("queue", "retry", "job-nope", "--db", url).exit_code == 1
    assert _cli("queue", "retry", poison, "--db", url).exit_code == 0
    assert _cli("queue", "park", poison, "--reason", "poison", "--db", url).exit_code == 0
    with open_queue(url) as queue:
        assert (queue.get(poison).status, queue.get(poison).last_error) == ("parked", "poison")
    with _store(tmp_path / "app.db") as store:  # the built-in handler indexed the turn (no model set)
        assert [i.key for i in store.search(thread_messages("t1"))] == ["p1"]
    assert _cli("worker", "--until-empty", "--concurrency", "2", "--db", url).exit_code == 0


def test_remem_worker_runs_jobs_until_sigterm_then_finishes_cleanly(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'app.db'}"
    with _store(tmp_path / "app.db"), open_queue(url) as queue:
        enqueue_extraction(queue, [HumanMessage("I live in Porto.", id="p1")], user_id="u1", thread_id="t1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "REMEM_EMBEDDER": "fake"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "remem.cli", "worker", "--db", url, "--concurrency", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with open_queue(url) as queue:
            deadline = time.monotonic() + 60
            while queue.status().total("done") < 1:
                assert worker.poll() is None and time.monotonic() < deadline, worker.communicate()
                time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    assert "worker stopped after 1 job(s)" in out
