"""Workers: claim a job, run its handler under a heartbeat, then mark it done, retried or parked."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remem._secrets import mask_secrets
from remem.errors import ArgumentTypeError
from remem.jobs._queue import DEFAULT_LEASE, Job, JobQueue, new_owner

__all__ = ["Backoff", "Handler", "Worker", "WorkerPool", "run_workers", "start_workers"]

logger = logging.getLogger(__name__)

Handler = Callable[[Job], Any]
"""Runs one job. It must be idempotent: a job may run again (its worker died before marking it done);
use ``job.id`` and the payload to make a second run write the same thing, or nothing."""


@dataclass(frozen=True)
class Backoff:
    """How long a failed job waits before its next attempt: ``base * factor ** (attempts - 1)``, at most ``cap``."""

    base: float = 2.0
    factor: float = 2.0
    cap: float = 600.0

    def delay(self, attempts: int) -> float:
        return float(min(self.cap, self.base * self.factor ** max(0, attempts - 1)))


class Worker:
    """Runs the jobs of the kinds it has handlers for, one at a time.

    While a handler runs, a heartbeat extends the job's lease every ``lease / 3`` seconds; if the process
    dies, the lease expires (by the database's clock) and another worker takes the job again. A handler
    that raises sends the job back to the queue after a backoff, or parks it (with the error) once it has
    used ``max_attempts`` runs. ``on_done`` (optional) is called with each job and its outcome: ``"done"``,
    ``"queued"`` (to be retried), ``"parked"`` or ``"lost"`` (the claim expired before the end).
    """

    def __init__(
        self,
        queue: JobQueue,
        handlers: Mapping[str, Handler],
        *,
        lease: float = DEFAULT_LEASE,
        poll: float = 1.0,
        backoff: Backoff | None = None,
        on_done: Callable[[Job, str], None] | None = None,
    ) -> None:
        if not isinstance(queue, JobQueue):
            raise ArgumentTypeError(
                f"queue takes a remem.jobs.JobQueue (open_queue(url)); got {type(queue).__name__}"
            )
        if not handlers:
            raise ArgumentTypeError("a worker needs handlers: a mapping of job kind to a function of the job")
        self.queue = queue
        self.handlers = dict(handlers)
        self.lease = float(lease)
        self.poll = float(poll)
        self.backoff = backoff or Backoff()
        self.on_done = on_done
        self.owner = new_owner()

    def run_once(self) -> Job | None:
        """Claim one ready job and run it; returns it (None when no job was ready)."""
        job = self.queue.claim(self.owner, lease=self.lease, kinds=sorted(self.handlers))
        if job is None:
            return None
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(job, stop), name="remem-job-heartbeat", daemon=True)
        beat.start()
        try:
            self.handlers[job.kind](job)
        except Exception as exc:
            stop.set()
            beat.join()
            error = mask_secrets(f"{type(exc).__name__}: {exc}")
            outcome = self.queue.fail(job, error, delay=self.backoff.delay(job.attempts)) or "lost"
            log = logger.error if outcome == "parked" else logger.warning
            log("job %s (%s) failed on attempt %d: %s; %s", job.id, job.kind, job.attempts, error, outcome)
        else:
            stop.set()
            beat.join()
            outcome = "done" if self.queue.complete(job) else "lost"
            if outcome == "lost":
                logger.warning("job %s (%s) ran past its lease: another run owns it now", job.id, job.kind)
        if self.on_done is not None:
            self.on_done(job, outcome)
        return job

    def _beat(self, job: Job, stop: threading.Event) -> None:
        while not stop.wait(self.lease / 3):
            try:
                if not self.queue.heartbeat(job, lease=self.lease):
                    return
            except Exception as exc:  # the next beat may reach the database again
                logger.warning("heartbeat of job %s failed: %s", job.id, exc)

    def run(self, *, stop: threading.Event | None = None, until_empty: bool = False) -> int:
        """Run jobs until ``stop`` is set (or, with ``until_empty``, until none is ready); returns how many ran."""
        stop = stop or threading.Event()
        ran = 0
        while not stop.is_set():
            if self.run_once() is not None:
                ran += 1
            elif until_empty:
                break
            else:
                stop.wait(self.poll)
        return ran


def run_workers(
    queue: JobQueue,
    handlers: Mapping[str, Handler],
    *,
    concurrency: int = 1,
    until_empty: bool = False,
    stop: threading.Event | None = None,
    handle_signals: bool = False,
    on_hangup: Callable[[], None] | None = None,
    **options: Any,
) -> int:
    """Run ``concurrency`` workers in threads of this process until ``stop`` (or the queue is empty, with
    ``until_empty``); returns how many jobs ran. ``handle_signals``: SIGTERM and SIGINT stop the workers
    after their current job, and SIGHUP calls ``on_hangup`` (:meth:`BuiltinHandlers.reload`: the
    configuration is read again, so a rotated model key is used from the next job on) (the main thread
    only)."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ArgumentTypeError(f"concurrency is a whole number of workers, at least 1; got {concurrency!r}")
    stop = stop or threading.Event()
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        if on_hangup is not None:
            signal.signal(signal.SIGHUP, lambda *_: on_hangup())
    workers = [Worker(queue, handlers, **options) for _ in range(concurrency)]
    counts = [0] * concurrency

    def work(n: int) -> None:
        counts[n] = workers[n].run(stop=stop, until_empty=until_empty)

    threads = [threading.Thread(target=work, args=(n,), name=f"remem-worker-{n}") for n in range(concurrency)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    return sum(counts)


class WorkerPool:
    """Workers running in background threads of this process (:func:`start_workers`); :meth:`stop` them."""

    def __init__(self, thread: threading.Thread, stop: threading.Event, ran: list[int]) -> None:
        self._thread, self._stop, self._ran = thread, stop, ran

    def stop(self, timeout: float | None = None) -> int:
        """Stop the workers after their current jobs; returns how many jobs they ran."""
        self._stop.set()
        self._thread.join(timeout)
        return sum(self._ran)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_workers(
    queue: JobQueue, handlers: Mapping[str, Handler], *, concurrency: int = 1, **options: Any
) -> WorkerPool:
    """Run :func:`run_workers` in the background of this process (an app that runs its own jobs); the
    jobs stay in the database, so what a crash interrupts is run again by the next worker anywhere."""
    stop = threading.Event()
    ran: list[int] = []

    def run() -> None:
        ran.append(run_workers(queue, handlers, concurrency=concurrency, stop=stop, **options))

    thread = threading.Thread(target=run, name="remem-workers", daemon=True)
    thread.start()
    return WorkerPool(thread, stop, ran)
