"""The queue's interface: a backend runs one program in one transaction; every operation lives here."""

from __future__ import annotations

import json
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from remem._statements import Program
from remem.errors import ArgumentTypeError, NotFoundError, RememUsageError
from remem.jobs import _sql

__all__ = ["DEFAULT_LEASE", "DEFAULT_MAX_ATTEMPTS", "Job", "JobQueue", "QueueStatus", "new_owner"]

DEFAULT_LEASE = 60.0  # seconds a claim holds a job without a heartbeat (a worker beats every lease / 3)
DEFAULT_MAX_ATTEMPTS = 5


def new_owner() -> str:
    """A name for one claim holder: the process id and a random part (no host name)."""
    return f"pid{os.getpid()}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Job:
    """One job as stored: what to do (``kind``, ``payload``), for whom, and where it stands."""

    id: str
    kind: str
    payload: Any
    input_key: str | None
    serial_key: str | None
    user_id: str | None
    thread_id: str | None
    status: str
    attempts: int
    max_attempts: int
    run_after: float
    lease_until: float | None
    lease_owner: str | None
    last_error: str | None
    created_at: float
    updated_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Job:
        values = list(row)
        values[2] = None if values[2] is None else json.loads(values[2])
        return cls(*values)

    def as_dict(self) -> dict[str, Any]:
        """The job as JSON-ready data, without its payload (it holds the user's text)."""
        return {k: v for k, v in self.__dict__.items() if k != "payload"}


@dataclass
class QueueStatus:
    """Counts per kind and status, and how long the oldest queued job has waited (seconds)."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    oldest_queued_age: float | None = None

    def total(self, status: str) -> int:
        return sum(by_status.get(status, 0) for by_status in self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "totals": {s: self.total(s) for s in _sql.STATUSES},
            "oldest_queued_age": self.oldest_queued_age,
        }


def _check_text(value: object, name: str, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise ArgumentTypeError(
            f"{name} takes a non-empty str{' or None' if optional else ''}; got {value!r}"
        )


class JobQueue(ABC):
    """A durable queue of background jobs in a database table (``remem_jobs``).

    A backend implements :meth:`_run` (one program in one write transaction) and :meth:`close`; the
    schema is applied through :mod:`remem._migrate` at opening. All methods are thread-safe.
    """

    dialect: str = "sqlite"

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @abstractmethod
    def _run(self, program: Program[Any], *, claim: bool = False) -> Any:
        """Run ``program`` in one write transaction; returns its result. ``claim``: the program claims a
        job (on PostgreSQL claims take turns under a transaction lock; other operations do not wait)."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""

    def __enter__(self) -> JobQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ producing

    def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        input_key: str | None = None,
        serial_key: str | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        delay: float = 0.0,
    ) -> str:
        """Add a job (``payload``: JSON-ready data); returns its id.

        ``input_key`` names the input's identity: while a job with the same key is queued, running or
        done, enqueueing it again adds nothing and returns that job's id. Jobs with one ``serial_key``
        (say, a thread id) run one at a time, in the order they were queued. ``user_id`` and
        ``thread_id`` say whose data it holds (erasure removes the job with them).
        """
        _check_text(kind, "kind", optional=False)
        for name, value in (
            ("input_key", input_key),
            ("serial_key", serial_key),
            ("user_id", user_id),
            ("thread_id", thread_id),
        ):
            _check_text(value, name)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ArgumentTypeError(
                f"max_attempts is a whole number of runs, at least 1; got {max_attempts!r}"
            )
        try:
            json.dumps(payload)
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(
                f"a job's payload must be JSON-ready data (dicts, lists, texts): {exc}"
            ) from None
        return str(
            self._run(
                _sql.enqueue(
                    self.dialect,
                    job_id="job-" + uuid.uuid4().hex,
                    kind=kind,
                    payload=payload,
                    input_key=input_key,
                    serial_key=serial_key,
                    user_id=user_id,
                    thread_id=thread_id,
                    max_attempts=max_attempts,
                    delay=float(delay),
                )
            )
        )

    # ------------------------------------------------------------------ consuming

    def claim(
        self, owner: str, *, lease: float = DEFAULT_LEASE, kinds: Sequence[str] | None = None
    ) -> Job | None:
        """Take the next ready job for ``owner`` (see :func:`new_owner`) for ``lease`` seconds; None if none."""
        row = self._run(_sql.claim(self.dialect, owner=owner, lease=lease, kinds=kinds), claim=True)
        return None if row is None else Job.from_row(row)

    def heartbeat(self, job: Job, *, lease: float = DEFAULT_LEASE) -> bool:
        """Extend the claim on ``job``; False when it was lost (the lease expired and another worker took it)."""
        assert job.lease_owner is not None
        return bool(
            self._run(_sql.heartbeat(self.dialect, job_id=job.id, owner=job.lease_owner, lease=lease))
        )

    def complete(self, job: Job) -> bool:
        """Mark ``job`` done; False when its claim was lost (then another run owns it)."""
        assert job.lease_owner is not None
        return bool(self._run(_sql.complete(self.dialect, job_id=job.id, owner=job.lease_owner)))

    def fail(self, job: Job, error: str, *, delay: float) -> str | None:
        """Record that ``job`` failed: ``"queued"`` (it runs again after ``delay`` s) or ``"parked"``."""
        assert job.lease_owner is not None
        result = self._run(
            _sql.fail(self.dialect, job_id=job.id, owner=job.lease_owner, error=error[:2000], delay=delay)
        )
        return None if result is None else str(result)

    # ------------------------------------------------------------------ operating

    def status(self) -> QueueStatus:
        """How many jobs there are per kind and status."""
        found = QueueStatus()
        rows = self._run(_sql.status_counts(self.dialect))
        for kind, status, count, oldest, now in rows:
            found.counts.setdefault(str(kind), {})[str(status)] = int(count)
            if status == "queued":
                age = float(now) - float(oldest)
                found.oldest_queued_age = max(found.oldest_queued_age or 0.0, age)
        return found

    def jobs(self, *, status: str | None = None, limit: int = 50) -> list[Job]:
        """The jobs, newest first (``status``: only those)."""
        if status is not None and status not in _sql.STATUSES:
            raise RememUsageError(f"unknown job status {status!r}; use one of {', '.join(_sql.STATUSES)}")
        rows = self._run(_sql.list_jobs(self.dialect, status=status, job_id=None, limit=limit))
        return [Job.from_row(r) for r in rows]

    def get(self, job_id: str) -> Job:
        """One job; :class:`~remem.errors.NotFoundError` when there is none with that id."""
        rows = self._run(_sql.list_jobs(self.dialect, status=None, job_id=job_id, limit=1))
        if not rows:
            raise NotFoundError(f"there is no job {job_id!r}; `remem queue status` lists the queue")
        return Job.from_row(rows[0])

    def retry(self, job_id: str | None = None) -> int:
        """Queue a parked job again now (every parked job when ``job_id`` is None); returns how many."""
        return int(self._run(_sql.retry(self.dialect, job_id=job_id)))

    def park(self, job_id: str, reason: str = "parked by hand") -> int:
        """Park a queued job so that no worker runs it until :meth:`retry`; returns how many (0 or 1)."""
        return int(self._run(_sql.park(self.dialect, job_id=job_id, kind=None, reason=reason)))

    def park_kind(self, kind: str, reason: str = "parked by hand") -> int:
        """Park every queued job of ``kind``; returns how many."""
        return int(self._run(_sql.park(self.dialect, job_id=None, kind=kind, reason=reason)))

    def drop_waiting(
        self, thread_ids: Sequence[str], kinds: Sequence[str], rewrite: Callable[[str, Any], Any]
    ) -> int:
        """Delete the queued and parked jobs of ``kinds`` for ``thread_ids`` that ``rewrite(kind, payload)``
        returns None for, and give the payload it returns to the others (the same payload: unchanged);
        returns how many changed. A running job is left to its worker."""
        if not thread_ids or not kinds:
            return 0
        return int(
            self._run(_sql.drop_waiting(self.dialect, thread_ids=thread_ids, kinds=kinds, rewrite=rewrite))
        )

    def forget(self, *, user_id: str | None = None, thread_ids: Sequence[str] = ()) -> int:
        """Delete the jobs of ``user_id`` and of ``thread_ids`` (what erasure does); returns how many."""
        return int(self._run(_sql.forget_jobs(self.dialect, user_id=user_id, thread_ids=thread_ids)))
