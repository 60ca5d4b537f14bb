"""Taking and giving back a thread's lease: the lock in this process first, then the database's
(:mod:`._sqlite`, :mod:`._postgres`; in this process only for anything else). See :mod:`remem._lease`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal

from remem import _migrate
from remem._lease import _fence, _postgres, _sqlite
from remem._lease_target import LeaseTarget
from remem._statements import Program
from remem.errors import StorageError, ThreadBusyError
from remem.layout import check_label

__all__ = [
    "DEFAULT_LEASE_TIMEOUT",
    "TURN_LEASE_KEY",
    "LeaseTarget",
    "Scope",
    "ThreadLease",
    "atake_lease",
    "athread_lease",
    "carried_lease",
    "carry_lease",
    "close_idle_connections",
    "lease_waits",
    "retain_idle_connections",
    "take_lease",
    "thread_lease",
    "thread_leases",
    "write_lease",
]

DEFAULT_LEASE_TIMEOUT = 30.0
TURN_LEASE_KEY = "__pregel_remem_lease"
"""Where a run's config carries the lease of the turn it belongs to (``config["configurable"]``): set by
:func:`remem.run_turn` (:func:`carry_lease`), read by remem's savers (:func:`carried_lease`), which then
write under it (verifying it before each write) instead of taking the lease themselves. The ``__pregel_``
prefix keeps it out of checkpoint metadata and of the configs LangGraph streams, as LangGraph's own
run-scoped keys are."""
Scope = Literal["checkpoint", "memory"]
_POLL_FIRST, _POLL_MAX = 0.001, 0.01  # seconds between tries of a POSIX lock (it has no timed wait)


_Key = tuple[str, str, str, str]  # kind, where, scope, thread id
Release = Callable[[], None]
Alive = Callable[[], bool]  # whether the database still holds a lease that was taken
Held = tuple[Release, Alive, int | None]  # and the lease's fencing token (None: a lock in this process)


class _State:
    """What this process holds: its in-process locks and the worker threads of async leases."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.locks: dict[_Key, tuple[threading.Lock, int]] = {}  # lock, users (holders and waiters)
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None


_state = _State()


def _reset_after_fork() -> None:
    global _state
    _state = _State()  # a child holds none of its parent's leases


os.register_at_fork(after_in_child=_reset_after_fork)


def _busy(thread_id: str, target: LeaseTarget, waited: float, timeout: float) -> ThreadBusyError:
    return ThreadBusyError(
        f"thread {thread_id!r} is busy: another turn or append on it held its lease ({target.label}) "
        f"for the {waited:.1f} s this call waited (thread_lease_timeout = {timeout:g} s, "
        "REMEM_THREAD_LEASE_TIMEOUT). Nothing was written; retry when that turn has finished, "
        "raise the timeout, or send this turn to another thread"
    )


_LOST_BECAUSE = {
    "postgres": "its PostgreSQL connection ended (a server restart, the session was terminated, or "
    "idle_session_timeout)",
    "sqlite": "its lease file was deleted or replaced",
}
_FENCED = "another writer took the thread's lease since (its fencing token moved on)"


class ThreadLease:
    """A thread's lease, held: what its holder checks before each write (:meth:`verify`).

    :func:`thread_lease` yields one. :meth:`release` gives it back (once); ``scratch`` is where the holder
    keeps what it read while no other remem writer can change the thread."""

    def __init__(
        self, key: _Key, target: LeaseTarget, local: threading.Lock, held: Held, single_write: bool = False
    ) -> None:
        self.key, self.target, self._local = key, target, local
        self.scope, self.thread_id = key[2], key[3]
        self._release: Release | None = held[0]
        self._alive = held[1]
        self.fence = held[2]
        """The fencing token this lease got (see :mod:`._fence`); None for a lease in this process, or
        for one taken for a single write (``single_write``), which moves the token on itself."""
        self.single_write = single_write and target.kind != "process"
        self.in_transaction = False
        """Held by the write's own transaction (:func:`write_lease`), not by a session of its own."""
        self.lost = False
        self._why: str | None = None
        self.scratch: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"ThreadLease({self.thread_id!r}, scope={self.scope!r}, {self.target.label})"

    def verify(self) -> None:
        """Raise :class:`~remem.errors.StorageError` if the database no longer holds this lease (its
        PostgreSQL connection ended; its SQLite lease file was deleted), so that a holder whose lease
        another writer may have taken since never writes."""
        if not self.lost and self.active and self._alive():
            return
        raise self._lost(self._why or _LOST_BECAUSE.get(self.target.kind, "it was given back"))

    def _lost(self, why: str) -> StorageError:
        self.lost, self._why = True, why  # a later check says the same
        return StorageError(
            f"the lease of thread {self.thread_id!r} ({self.target.label}) was lost while this turn or "
            f"append held it: {why}, so another writer may hold the thread now. This write was not made; "
            "retry it (run_turn first finishes what an interrupted turn stored; an append sent again "
            "stores each message once)"
        )

    def fenced(self, dialect: _migrate.Dialect) -> Program[None]:
        """The check a write under this lease runs first in the transaction that commits it: the thread's
        fencing token is still this lease's, else :class:`~remem.errors.StorageError` (the transaction
        then rolls back, writing nothing). A lease in this process has no token and checks nothing. A
        lease taken for a single write moves the token on instead, fencing out every earlier holder (its
        write itself is guarded by what it writes: a checkpoint that must extend the thread's head)."""
        if not self.active and (self.fence is not None or self.single_write):
            raise self._lost("it was given back")
        key = _fence.lease_key(self.scope, self.thread_id)
        if self.in_transaction:
            yield _fence.take_in_transaction(key)
        if self.single_write:
            yield _fence.move_on(key, dialect)
            return
        if self.fence is None:
            return
        rows = yield _fence.check(key, dialect)
        if not rows or int(rows[0][0]) != self.fence:
            raise self._lost(_FENCED)

    async def averify(self) -> None:
        """Async version of :meth:`verify` (a PostgreSQL round trip runs off the event loop)."""
        if self.target.kind == "postgres" and not self.in_transaction:
            await asyncio.get_running_loop().run_in_executor(_executor(), self.verify)
        else:
            self.verify()

    @property
    def active(self) -> bool:
        return self._release is not None

    def release(self) -> None:
        release, self._release = self._release, None
        if release is None:
            return
        try:
            release()
        finally:
            self._local.release()
            _forget_local(self.key)


def _local_lock(key: _Key) -> threading.Lock:
    with _state.mutex:
        lock, users = _state.locks.get(key, (None, 0))
        lock = lock or threading.Lock()
        _state.locks[key] = (lock, users + 1)
        return lock


def _forget_local(key: _Key) -> None:
    with _state.mutex:
        lock, users = _state.locks.get(key, (None, 0))
        if lock is None:
            return
        if users <= 1:
            del _state.locks[key]
        else:
            _state.locks[key] = (lock, users - 1)


def _always() -> bool:
    return True  # a lock in this process lasts as long as this process


def _nothing() -> None:
    return None


def _backend_try(
    target: LeaseTarget, scope: str, thread_id: str, wait: float, single_write: bool = False
) -> Held | None:
    """One try at the lease held by the database (PostgreSQL waits up to ``wait`` s in its own queue)."""
    if target.kind == "sqlite":
        return _sqlite.try_lease(target, scope, thread_id, not single_write)
    if target.kind == "postgres":
        return _postgres.lock(target, scope, thread_id, wait, not single_write)
    return _nothing, _always, None


_WAITS = {"acquired": 0.0, "busy": 0.0, "wait_seconds": 0.0}  # this process's, since it started
_WAITS_LOCK = threading.Lock()


def lease_waits() -> dict[str, float]:
    """This process's thread leases so far: ``acquired`` (leases taken), ``busy`` (waits that ended in
    ThreadBusyError) and ``wait_seconds`` (the time all of them waited; what ``remem serve``'s /metrics
    shows)."""
    with _WAITS_LOCK:
        return dict(_WAITS)


def _count_wait(seconds: float, *, busy: bool) -> None:
    with _WAITS_LOCK:
        _WAITS["busy" if busy else "acquired"] += 1
        _WAITS["wait_seconds"] += seconds


class _Attempt:
    """The bookkeeping of one acquisition: the in-process lock first, then the database's lease."""

    def __init__(self, target: LeaseTarget, scope: str, thread_id: str, timeout: float) -> None:
        self.target, self.scope, self.thread_id, self.timeout = target, scope, thread_id, timeout
        self.key: _Key = _key_of(target, scope, thread_id)
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.local = _local_lock(self.key)
        self.pause = _POLL_FIRST

    def left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def next_pause(self) -> float:
        pause, self.pause = self.pause, min(self.pause * 2, _POLL_MAX)
        return min(self.left(), pause * random.uniform(0.5, 1.5))

    def busy(self) -> ThreadBusyError:
        waited = time.monotonic() - self.started
        _count_wait(waited, busy=True)
        return _busy(self.thread_id, self.target, waited, self.timeout)

    def taken(self, held: Held, single_write: bool = False) -> ThreadLease:
        _count_wait(time.monotonic() - self.started, busy=False)
        return ThreadLease(self.key, self.target, self.local, held, single_write)

    def give_up(self, *, locally_held: bool) -> None:
        if locally_held:
            self.local.release()
        _forget_local(self.key)


def _acquire(
    target: LeaseTarget, scope: str, thread_id: str, timeout: float, single_write: bool = False
) -> ThreadLease:
    attempt = _Attempt(target, scope, thread_id, timeout)
    if not attempt.local.acquire(timeout=attempt.left()):
        attempt.give_up(locally_held=False)
        raise attempt.busy()
    try:
        while True:
            held = _backend_try(target, scope, thread_id, attempt.left(), single_write)
            if held is not None:
                return attempt.taken(held, single_write)
            if not attempt.left():
                raise attempt.busy()
            time.sleep(attempt.next_pause())  # a POSIX lock has no timed wait
    except BaseException:
        attempt.give_up(locally_held=True)
        raise


async def _in_worker(target: LeaseTarget, scope: str, thread_id: str, single_write: bool) -> Held | None:
    """One try at a database's lease in a worker thread (a round trip to PostgreSQL, a write of the fencing
    token to SQLite: off the event loop); a lock taken after the caller gave up is given back."""
    future = _executor().submit(_backend_try, target, scope, thread_id, 0.0, single_write)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.add_done_callback(_release_if_taken)
        raise


def _release_if_taken(future: concurrent.futures.Future[Held | None]) -> None:
    if not future.cancelled() and future.exception() is None:
        held = future.result()
        if held is not None:
            held[0]()


async def _aacquire(
    target: LeaseTarget, scope: str, thread_id: str, timeout: float, single_write: bool = False
) -> ThreadLease:
    """Async version of :func:`_acquire`: it polls, so a wait never holds a thread or the event loop."""
    attempt = _Attempt(target, scope, thread_id, timeout)
    while not attempt.local.acquire(blocking=False):
        if not attempt.left():
            attempt.give_up(locally_held=False)
            raise attempt.busy()
        try:
            await asyncio.sleep(attempt.next_pause())
        except BaseException:
            attempt.give_up(locally_held=False)
            raise
    try:
        while True:
            if target.kind == "process":
                held = _backend_try(target, scope, thread_id, 0.0)
            else:
                held = await _in_worker(target, scope, thread_id, single_write)
            if held is not None:
                return attempt.taken(held, single_write)
            if not attempt.left():
                raise attempt.busy()
            await asyncio.sleep(attempt.next_pause())
    except BaseException:
        attempt.give_up(locally_held=True)
        raise


def _key_of(target: LeaseTarget, scope: str, thread_id: str) -> _Key:
    return (target.kind, target.where, scope, thread_id)


def retain_idle_connections(target: LeaseTarget) -> None:
    """Keep the connections leases of ``target`` use open between leases, for the next one, until as many
    :func:`close_idle_connections` calls: PostgreSQL's lease sessions, a SQLite file's connection that
    writes its fencing tokens. Savers and stores of ``from_conn_string`` do (see
    :func:`._postgres.retain_idle_connections`)."""
    _postgres.retain_idle_connections(target)
    if target.kind == "sqlite":
        _sqlite.retain_idle_connection(target)


def close_idle_connections(target: LeaseTarget) -> None:
    """One :func:`retain_idle_connections` fewer; with none left, the idle connections are closed."""
    _postgres.close_idle_connections(target)
    if target.kind == "sqlite":
        _sqlite.close_idle_connection(target)


def carry_lease(config: Any, lease: ThreadLease) -> Any:
    """``config`` (a LangGraph ``RunnableConfig``) carrying ``lease`` under :data:`TURN_LEASE_KEY`: what
    :func:`remem.run_turn` passes its runs, so that the saver writes under the lease the turn holds."""
    return {**config, "configurable": {**config.get("configurable", {}), TURN_LEASE_KEY: lease}}


def carried_lease(config: Any, target: LeaseTarget, *, scope: Scope) -> ThreadLease | None:
    """The lease ``config`` carries (:func:`carry_lease`) when it is held, for ``config``'s thread and
    ``scope``, in ``target``'s database; else None (a run outside a turn)."""
    conf = config.get("configurable") or {}
    lease = conf.get(TURN_LEASE_KEY)
    if not isinstance(lease, ThreadLease) or not lease.active:
        return None
    if lease.scope != scope or lease.thread_id != str(conf.get("thread_id")) or lease.target != target:
        return None
    return lease


@contextlib.contextmanager
def thread_leases(
    target: LeaseTarget, thread_ids: Sequence[str], *, scope: Scope, timeout: float = DEFAULT_LEASE_TIMEOUT
) -> Iterator[None]:
    """Hold the leases of all of ``thread_ids`` for the block (an erasure's fence), taken in sorted order so
    that two such holders never wait for each other in a circle; ``timeout`` bounds the whole wait. On
    PostgreSQL they share one session, however many threads there are (a lease each would take a
    connection each)."""
    for thread_id in thread_ids:
        check_label(thread_id, "thread_id")
    ids = sorted(set(thread_ids))
    if target.kind != "postgres":
        deadline = time.monotonic() + timeout
        with contextlib.ExitStack() as stack:
            for thread_id in ids:
                left = max(deadline - time.monotonic(), 0.0)
                stack.enter_context(thread_lease(target, thread_id, scope=scope, timeout=left))
            yield
        return
    import psycopg

    attempts: list[_Attempt] = []
    conn: Any = None
    try:
        for thread_id in ids:
            attempt = _Attempt(target, scope, thread_id, timeout)
            if not attempt.local.acquire(timeout=attempt.left()):
                attempt.give_up(locally_held=False)
                raise attempt.busy()
            attempts.append(attempt)
        if attempts:
            conn = _postgres.connection(target.where, reuse=False)[0]
        for attempt in attempts:
            try:
                got = _postgres.try_lock(
                    conn, _postgres.advisory_key(scope, attempt.thread_id), attempt.left()
                )
            except psycopg.Error as exc:
                raise StorageError(
                    f"PostgreSQL failed while taking the threads' leases ({type(exc).__name__}); retry"
                ) from exc
            if not got:
                raise attempt.busy()
        if attempts:  # a writer that lost its lease to this holder can no longer commit
            _postgres.bump(conn, [_postgres.advisory_key(scope, a.thread_id) for a in attempts])
        yield
    finally:
        if conn is not None:
            conn.close()  # the server drops every advisory lock of the session
        for attempt in attempts:
            attempt.give_up(locally_held=True)


@contextlib.contextmanager
def thread_lease(
    target: LeaseTarget,
    thread_id: str,
    *,
    scope: Scope,
    timeout: float = DEFAULT_LEASE_TIMEOUT,
    single_write: bool = False,
) -> Iterator[ThreadLease]:
    """Hold the lease of ``thread_id`` at ``target`` (its database) for the block (waiting up to ``timeout`` s);
    the block gets the :class:`ThreadLease` to verify before each write. An id that is not valid text (a
    lone surrogate, NUL, empty) is refused here, before anything is taken or written. ``single_write``:
    the block makes one write, whose transaction moves the fencing token on (:meth:`ThreadLease.fenced`),
    so taking the lease writes nothing."""
    check_label(thread_id, "thread_id")
    lease = _acquire(target, scope, thread_id, timeout, single_write)
    try:
        yield lease
    finally:
        lease.release()


def write_lease(target: LeaseTarget, thread_id: str, *, scope: Scope) -> ThreadLease | None:
    """A lease for one write that the write's own transaction takes, on PostgreSQL: its first statement
    takes the thread's advisory lock for the transaction (``pg_try_advisory_xact_lock``, the lock a
    :func:`thread_lease` session takes) and its fencing statement moves the token on, as a
    ``single_write`` lease's. Nothing is sent before the transaction and nothing after it (a session lease
    costs four round trips on a connection of its own). When another session holds the lock the statement
    fails the transaction with a division by zero (the saver's :class:`~remem.errors.StaleCacheError`),
    which writes nothing; the write then waits for the lease with :func:`thread_lease`. None for any
    other backend (SQLite's lease is a lock on a local file, which costs no round trip)."""
    if target.kind != "postgres":
        return None
    check_label(thread_id, "thread_id")
    local = threading.Lock()
    local.acquire()  # the lease's own, so that release() finds it held: no other caller waits on it
    lease = ThreadLease(_key_of(target, scope, thread_id), target, local, (_nothing, _always, None), True)
    lease.in_transaction = True
    return lease


def take_lease(
    target: LeaseTarget, thread_id: str, *, scope: Scope, timeout: float = DEFAULT_LEASE_TIMEOUT
) -> ThreadLease:
    """The lease of ``thread_id``, held until :meth:`ThreadLease.release` is called, from any thread: a
    lease handed over (see :mod:`remem.checkpoint._claims`)."""
    check_label(thread_id, "thread_id")
    return _acquire(target, scope, thread_id, timeout)


async def atake_lease(
    target: LeaseTarget, thread_id: str, *, scope: Scope, timeout: float = DEFAULT_LEASE_TIMEOUT
) -> ThreadLease:
    """Async version of :func:`take_lease`."""
    check_label(thread_id, "thread_id")
    return await _aacquire(target, scope, thread_id, timeout)


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    with _state.mutex:
        if _state.executor is None:
            _state.executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="remem-lease")
        return _state.executor


@contextlib.asynccontextmanager
async def athread_lease(
    target: LeaseTarget,
    thread_id: str,
    *,
    scope: Scope,
    timeout: float = DEFAULT_LEASE_TIMEOUT,
    single_write: bool = False,
) -> AsyncIterator[ThreadLease]:
    """Async version of :func:`thread_lease`."""
    check_label(thread_id, "thread_id")
    lease = await _aacquire(target, scope, thread_id, timeout, single_write)
    try:
        yield lease
    finally:
        if target.kind == "postgres":  # a round trip to the server: off the event loop
            await asyncio.get_running_loop().run_in_executor(_executor(), lease.release)
        else:
            lease.release()
