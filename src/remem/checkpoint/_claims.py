"""A bare run's claim on its thread for one model call, and what became of each run's checkpoints.

A bare ``agent.invoke`` (no :func:`remem.run_turn`) holds the thread's lease only while each checkpoint is
written, so a run another one overtook learns it only when its next checkpoint is refused: with
LangGraph's default ``durability="async"`` that is after its model call was paid and after
``ContextCardMiddleware`` mirrored the turn into memory. The middleware claims the thread before the call
instead (:meth:`~remem.checkpoint._base.RememSaver.claim_model_call`):

1. it waits until the checkpoint the model call runs from is written (:meth:`Claims.wait_written`), and
   fails with the run's own refusal if one of the run's checkpoints was refused;
2. it takes the thread's checkpoint lease and checks that this checkpoint is still the thread's head;
3. it hands the lease over (:meth:`Claims.hand_over`): the run's next put, the checkpoint after the call,
   is written under it and gives it back (:meth:`Claims.take`). A run that overtakes waits for that lease.

Runs are told apart by :data:`~remem.checkpoint._ops.RUN_MARK`, a token the saver puts next to ``FROM_HEAD`` in what a run
loads: LangGraph passes it to the run's puts and to its tasks' configs.

What the saver knows of its runs (their written and refused checkpoints, the claims handed over) is one
:class:`Claims`, held by the saver's context (``saver._ctx.claims``) and shared by its ``with_allowlist``
clones, which a run may use in its place. The middleware gets a :class:`Claim` back, which knows its
:class:`Claims`, to give the claim back.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from remem._lease import LeaseTarget, ThreadLease
from remem.errors import RememError, ThreadBusyError

__all__ = ["Claim", "Claims"]

_KEEP = 512  # runs remembered (a run's outcome is asked for within the run)
_ClaimKey = tuple[LeaseTarget, str, str]  # target, thread id, the checkpoint the claimed call runs from


def _keep(table: OrderedDict[str, Any], run: str, value: Any) -> None:
    table[run] = value
    table.move_to_end(run)
    while len(table) > _KEEP:
        table.popitem(last=False)


class Claims:
    """One saver's runs: the checkpoints each wrote, the refusal that stopped it, the claims handed over."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._written: OrderedDict[str, set[str]] = OrderedDict()
        self._failed: OrderedDict[str, BaseException] = OrderedDict()
        self._claims: dict[_ClaimKey, ThreadLease] = {}
        self._in_flight: set[tuple[str, str]] = set()

    @contextlib.contextmanager
    def putting(self, run: str | None, checkpoint_id: str) -> Iterator[None]:
        """Marks the run's put of ``checkpoint_id`` under way, for :meth:`in_flight` (no run: nothing)."""
        if not run:
            yield
            return
        with self._cond:
            self._in_flight.add((run, checkpoint_id))
        try:
            yield
        finally:
            with self._cond:
                self._in_flight.discard((run, checkpoint_id))
                self._cond.notify_all()

    def in_flight(self, run: str, checkpoint_id: str) -> bool:
        """Whether this saver's put of the run's checkpoint ``checkpoint_id`` is under way: the writes on it
        then wait for it (:meth:`settle`) instead of finding it not stored yet."""
        with self._cond:
            return (run, checkpoint_id) in self._in_flight

    def settle(self, run: str, checkpoint_id: str, timeout: float) -> None:
        """Wait while this saver's put of the run's checkpoint ``checkpoint_id`` is under way."""
        with self._cond:
            self._cond.wait_for(lambda: (run, checkpoint_id) not in self._in_flight, timeout=timeout)

    def record_written(self, run: str, checkpoint_id: str) -> None:
        with self._cond:
            _keep(self._written, run, self._written.get(run, set()) | {checkpoint_id})
            self._cond.notify_all()

    def written(self, run: str, checkpoint_id: str) -> bool:
        """Whether this saver wrote the run's checkpoint ``checkpoint_id`` (without waiting)."""
        with self._cond:
            return checkpoint_id in self._written.get(run, ())

    def record_failed(self, run: str, exc: BaseException) -> None:
        with self._cond:
            _keep(self._failed, run, exc)
            self._cond.notify_all()

    def wait_written(self, run: str, checkpoint_id: str, timeout: float) -> bool:
        """Wait until the run's checkpoint ``checkpoint_id`` is written (True), or raise what refused one of
        the run's checkpoints (LangGraph writes a run's checkpoints in order: after a refusal, none follows).
        False when neither came within ``timeout`` (a put still waiting for the thread's lease)."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: checkpoint_id in self._written.get(run, ()) or run in self._failed, timeout=timeout
            )
            failed = self._failed.get(run)
        if failed is not None:  # a copy: the put's own error is raised in the run's thread already
            kind = type(failed) if isinstance(failed, RememError) else ThreadBusyError
            raise kind(str(failed)) from failed
        return bool(done)

    def hand_over(self, thread_id: str, checkpoint_id: str, lease: ThreadLease) -> Claim:
        with self._cond:
            self._claims[(lease.target, thread_id, checkpoint_id)] = lease
        return Claim(self, lease)

    def take(self, target: LeaseTarget, thread_id: str, parent_id: str | None) -> ThreadLease | None:
        """The claim a put whose parent is ``parent_id`` writes under (and then releases), if any."""
        if parent_id is None:
            return None
        with self._cond:
            return self._claims.pop((target, thread_id, parent_id), None)

    def withdraw(self, lease: ThreadLease) -> None:
        """Give back a claim no put took (the model call failed, or the run stopped before its checkpoint)."""
        with self._cond:
            keys = [k for k, held in self._claims.items() if held is lease]
            for key in keys:
                del self._claims[key]
        if keys:
            lease.release()


@dataclass(frozen=True)
class Claim:
    """A model call's claim on its thread (:meth:`~remem.checkpoint._base.RememSaver.claim_model_call`)."""

    claims: Claims
    lease: ThreadLease

    def withdraw(self) -> None:
        """Give the claim back if no put took it (:meth:`Claims.withdraw`)."""
        self.claims.withdraw(self.lease)

    def expire(self, seconds: float) -> None:
        """Give the claim back after ``seconds`` if no put took it by then (a run stopped between its model
        call and the checkpoint after it, without an error a middleware sees)."""
        timer = threading.Timer(seconds, self.withdraw)
        timer.daemon = True
        timer.start()
