"""One writer per thread: a lease on a thread, held by the database, while one turn or append writes it.

A second turn (or append) on the same thread waits for the lease, at most ``timeout`` seconds, and then
fails with :class:`~remem.errors.ThreadBusyError` before it has written anything. Where the lease lives is
the :class:`~remem._lease_target.LeaseTarget` each function is given (the database a saver or store holds
a connection to: ``saver.lease_target``, :func:`remem.checkpoint._targets.checkpointer_lease_target`):

- a SQLite file: a byte-range lock on a sidecar file ``<database>-lease``, one byte per thread (its
  offset a hash of the thread id). On Linux it is an open-file-description lock (``F_OFD_SETLK``): it
  belongs to the descriptor remem opened, so another descriptor of the file closed in the same process (a
  backup copying the folder) does not drop it, as it would drop a POSIX ``lockf`` lock (used elsewhere).
  The kernel drops it when the holding process dies, so a SIGKILLed writer never blocks the next one; no
  SQLite write lock is held during a turn. The descriptor is closed when the process holds no lease of
  that file any more. A lease file deleted or replaced while a lease is held guards nothing: the holder
  finds it at its next write (:meth:`ThreadLease.verify`) and fails instead of writing.
- PostgreSQL: a session advisory lock (``pg_advisory_lock`` on a 64-bit hash of the thread id) on a
  connection kept for the lease; the server drops it when that connection dies. Then another writer may
  take it while the first still runs its turn, so a holder checks the lease before each write (a
  checkpoint, a memory append: :meth:`ThreadLease.verify`, one round trip on the lease's connection) and
  fails with :class:`~remem.errors.StorageError` instead of writing beside the new holder.
- anything else (``InMemorySaver``, ``InMemoryStore``, ``:memory:``): a lock in this process.

Waiters on a SQLite lease are not served first come, first served: ``fcntl`` has no timed wait (a
blocking ``F_SETLKW`` can only be cut short by a signal), and Linux wakes every waiter of a released
lock to race for it, so there is no kernel queue to join. A waiter tries again after 1-10 ms (doubling,
jittered) until it gets the lease or its timeout passes. A fair order would need a queue of tickets in
the database, which a waiter killed with SIGKILL would leave behind for the others to step over; the
bounded wait and :class:`~remem.errors.ThreadBusyError` were judged enough. Sync PostgreSQL waiters
queue in the server (``pg_advisory_lock`` under ``lock_timeout``), in order; async ones poll as well.

Byte-range and advisory locks belong to a process (a session), not a thread, so a lock in this process
per (database, thread) comes first. No code looks a lease up: a holder passes it on explicitly, and taking
a lease one holds already waits for it like any other taker (then fails). A turn's runs carry it in their
config (:data:`TURN_LEASE_KEY`), and the saver writes under the lease it finds there. ``scope`` keeps the checkpointer's lease apart from the
memory client's, which a turn takes inside its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import random
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from remem._files import make_private_file
from remem._lease_target import LeaseTarget
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
_IDLE_PG_CONNECTIONS = 4  # kept per server for the next lease


_Key = tuple[str, str, str, str]  # kind, where, scope, thread id
Release = Callable[[], None]
Alive = Callable[[], bool]  # whether the database still holds a lease that was taken


class _State:
    """What this process holds: its in-process locks, lock files and idle lease connections."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.locks: dict[_Key, tuple[threading.Lock, int]] = {}  # lock, users (holders and waiters)
        self.files: dict[str, ThreadLeaseFile] = {}  # by database path: the lease file open now
        self.idle: dict[str, list[Any]] = {}
        self.retained: dict[str, int] = {}  # conninfo -> savers and stores that keep idle lease connections
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None


_state = _State()


_inherited: list[Any] = []  # the parent's lease connections, never used nor closed in a child


def _reset_after_fork() -> None:
    # A child holds none of its parent's leases, and must not share its sockets: closing (or collecting) an
    # inherited connection would end the parent's session, so they are kept unused. An inherited lease file
    # descriptor shares the parent's open file description, whose OFD locks are the parent's: the child
    # closes it (the parent's locks stay: its own descriptor still refers to them), else a parent that dies
    # would leave its leases held by the child, and opens its own.
    global _state
    _inherited.append(_state.idle)
    files = _state.files
    _state = _State()
    for file in files.values():
        with contextlib.suppress(OSError):
            os.close(file.fd)


os.register_at_fork(after_in_child=_reset_after_fork)


# -------------------------------------------------------------------------------- taking and giving back


def _offset(scope: str, thread_id: str) -> int:
    digest = hashlib.blake2b(f"remem:{scope}:{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2  # a non-negative file offset (off_t is signed 64-bit)


def _advisory_key(scope: str, thread_id: str) -> int:
    digest = hashlib.blake2b(f"remem:{scope}:{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


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


class ThreadLease:
    """A thread's lease, held: what its holder checks before each write (:meth:`verify`).

    :func:`thread_lease` yields one. :meth:`release` gives it back (once); ``scratch`` is where the holder
    keeps what it read while no other remem writer can change the thread."""

    def __init__(
        self, key: _Key, target: LeaseTarget, local: threading.Lock, held: tuple[Release, Alive]
    ) -> None:
        self.key, self.target, self._local = key, target, local
        self.scope, self.thread_id = key[2], key[3]
        self._release: Release | None = held[0]
        self._alive = held[1]
        self.lost = False
        self.scratch: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"ThreadLease({self.thread_id!r}, scope={self.scope!r}, {self.target.label})"

    def verify(self) -> None:
        """Raise :class:`~remem.errors.StorageError` if the database no longer holds this lease (its
        PostgreSQL connection ended; its SQLite lease file was deleted), so that a holder whose lease
        another writer may have taken since never writes."""
        if not self.lost and self.active and self._alive():
            return
        self.lost = True
        why = _LOST_BECAUSE.get(self.target.kind, "it was given back")
        raise StorageError(
            f"the lease of thread {self.thread_id!r} ({self.target.label}) was lost while this turn or "
            f"append held it: {why}, so another writer may hold the thread now. This write was not made; "
            "retry it (run_turn first finishes what an interrupted turn stored; an append sent again "
            "stores each message once)"
        )

    async def averify(self) -> None:
        """Async version of :meth:`verify` (a PostgreSQL round trip runs off the event loop)."""
        if self.target.kind == "postgres":
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


_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)  # Linux; elsewhere POSIX locks (lockf)
_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (0 for an OFD lock)


class ThreadLeaseFile:
    """A lease file open in this process, the leases held on it, and which file it is (device, inode)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd, self.users = path, fd, 0
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)

    def current(self) -> bool:
        """Whether ``path`` still names the file this descriptor holds (not deleted, not replaced)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity


def _open_lease_file(path: str) -> ThreadLeaseFile:
    """The lease file of the database at ``path``, opened if this process has it open for no lease."""
    with _state.mutex:
        file = _state.files.get(path)
        if file is None:
            lease_path = Path(path + "-lease")
            try:
                make_private_file(lease_path)
                file = ThreadLeaseFile(lease_path, os.open(lease_path, os.O_RDWR))
            except OSError as exc:
                raise StorageError(
                    f"cannot open the lease file {lease_path} ({exc}); check that its folder is writable"
                ) from exc
            _state.files[path] = file
        file.users += 1
        return file


def _close_lease_file(path: str, file: ThreadLeaseFile, *, stale: bool = False) -> None:
    """One lease of ``file`` fewer; closed when it holds none (``stale``: never opened again)."""
    with _state.mutex:
        file.users -= 1
        if stale and _state.files.get(path) is file:
            del _state.files[path]
        if file.users > 0:
            return
        if _state.files.get(path) is file:
            del _state.files[path]
    os.close(file.fd)


def _byte_lock(fd: int, offset: int, exclusive: bool) -> None:
    """Lock (or unlock) one byte without waiting; BlockingIOError / PermissionError when it is taken."""
    if _OFD_SETLK is None:
        fcntl.lockf(
            fd, (fcntl.LOCK_EX | fcntl.LOCK_NB) if exclusive else fcntl.LOCK_UN, 1, offset, os.SEEK_SET
        )
        return
    kind = fcntl.F_WRLCK if exclusive else fcntl.F_UNLCK
    fcntl.fcntl(fd, _OFD_SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0))


Held = tuple[Release, Alive]


def _always() -> bool:
    return True  # a POSIX lock or a lock in this process lasts as long as this process


def _sqlite_try(target: LeaseTarget, scope: str, thread_id: str) -> Held | None:
    offset = _offset(scope, thread_id)
    for _ in range(3):  # a lease file deleted or replaced meanwhile: once more, on the file there now
        file = _open_lease_file(target.where)
        try:
            _byte_lock(file.fd, offset, True)
        except (BlockingIOError, PermissionError):
            _close_lease_file(target.where, file)
            return None
        except BaseException:
            _close_lease_file(target.where, file)
            raise
        if file.current():
            break
        _byte_lock(file.fd, offset, False)
        _close_lease_file(target.where, file, stale=True)
    else:
        raise StorageError(
            f"the lease file {target.where}-lease keeps being deleted or replaced; stop what removes it, "
            "and retry"
        )

    def release() -> None:
        try:
            _byte_lock(file.fd, offset, False)
        finally:
            _close_lease_file(target.where, file)

    return release, file.current


def _pg_connection(conninfo: str, reuse: bool) -> tuple[Any, bool]:
    """A connection for a lease (an idle one when ``reuse``), and whether it was idle."""
    import psycopg

    with _state.mutex:
        idle = _state.idle.get(conninfo)
        if reuse and idle:
            return idle.pop(), True
    try:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10, application_name="remem-lease")
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot reach PostgreSQL for the thread's lease ({type(exc).__name__}); "
            "check that the server is up and retry"
        ) from exc
    return conn, False


def _pg_give_back(conninfo: str, conn: Any) -> None:
    with _state.mutex:
        if _state.retained.get(conninfo) and not conn.closed:
            idle = _state.idle.setdefault(conninfo, [])
            if len(idle) < _IDLE_PG_CONNECTIONS:
                idle.append(conn)
                return
    conn.close()


def retain_idle_connections(target: LeaseTarget) -> None:
    """Keep lease connections to ``target``'s server open between leases, for the next one, until the same
    number of :func:`close_idle_connections` calls. Only what remem opens and closes itself (a saver or
    store of ``from_conn_string``) retains them: on a connection or pool the caller made, each lease's
    connection is closed when the lease is given back, so no remem session outlives the caller's own (the
    caller can close everything and drop the database)."""
    if target.kind == "postgres":
        with _state.mutex:
            _state.retained[target.where] = _state.retained.get(target.where, 0) + 1


def close_idle_connections(target: LeaseTarget) -> None:
    """One :func:`retain_idle_connections` fewer; with none left, close the lease connections kept idle for
    ``target``'s server: nothing of remem's stays connected to its database (which can then be dropped)."""
    if target.kind != "postgres":
        return
    with _state.mutex:
        left = _state.retained.pop(target.where, 0) - 1
        if left > 0:
            _state.retained[target.where] = left
            return
        idle = _state.idle.pop(target.where, [])
    for conn in idle:
        conn.close()


def _pg_try(conn: Any, key: int, wait: float) -> bool:
    import psycopg

    left_ms = int(wait * 1000)
    try:
        if left_ms <= 0:
            return bool(conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0])
        # the server's own queue: fair, and woken the moment the holder lets go
        conn.execute(f"SET lock_timeout = {left_ms}")
        conn.execute("SELECT pg_advisory_lock(%s)", [key])
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def _pg_lock(target: LeaseTarget, scope: str, thread_id: str, wait: float) -> Held | None:
    """The advisory lock, waiting for it in the server's queue up to ``wait`` seconds (0: one try)."""
    import psycopg

    key = _advisory_key(scope, thread_id)
    reuse = True
    while True:
        conn, was_idle = _pg_connection(target.where, reuse)
        try:
            got = _pg_try(conn, key, wait)
            break
        except psycopg.Error as exc:
            conn.close()
            if was_idle:  # a connection left idle may have died with a server restart: once more, new
                reuse = False
                continue
            raise StorageError(
                f"PostgreSQL failed while taking the thread's lease ({type(exc).__name__}); retry"
            ) from exc
    if not got:
        _pg_give_back(target.where, conn)
        return None

    def release() -> None:
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])
        except psycopg.Error:
            conn.close()  # the server drops the lock with the connection
            return
        _pg_give_back(target.where, conn)

    def alive() -> bool:
        # A session keeps its advisory locks until it unlocks them or ends: a live session holds it.
        try:
            conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return not conn.closed

    return release, alive


def _nothing() -> None:
    return None


def _backend_try(target: LeaseTarget, scope: str, thread_id: str, wait: float) -> Held | None:
    """One try at the lease held by the database (PostgreSQL waits up to ``wait`` s in its own queue)."""
    if target.kind == "sqlite":
        return _sqlite_try(target, scope, thread_id)
    if target.kind == "postgres":
        return _pg_lock(target, scope, thread_id, wait)
    return _nothing, _always


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

    def taken(self, held: Held) -> ThreadLease:
        _count_wait(time.monotonic() - self.started, busy=False)
        return ThreadLease(self.key, self.target, self.local, held)

    def give_up(self, *, locally_held: bool) -> None:
        if locally_held:
            self.local.release()
        _forget_local(self.key)


def _acquire(target: LeaseTarget, scope: str, thread_id: str, timeout: float) -> ThreadLease:
    attempt = _Attempt(target, scope, thread_id, timeout)
    if not attempt.local.acquire(timeout=attempt.left()):
        attempt.give_up(locally_held=False)
        raise attempt.busy()
    try:
        while True:
            held = _backend_try(target, scope, thread_id, attempt.left())
            if held is not None:
                return attempt.taken(held)
            if not attempt.left():
                raise attempt.busy()
            time.sleep(attempt.next_pause())  # a POSIX lock has no timed wait
    except BaseException:
        attempt.give_up(locally_held=True)
        raise


async def _in_worker(target: LeaseTarget, scope: str, thread_id: str) -> Held | None:
    """One try at a PostgreSQL lease in a worker thread; a lock taken after the caller gave up is given back."""
    future = _executor().submit(_pg_lock, target, scope, thread_id, 0.0)
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


async def _aacquire(target: LeaseTarget, scope: str, thread_id: str, timeout: float) -> ThreadLease:
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
            if target.kind == "postgres":
                held = await _in_worker(target, scope, thread_id)
            else:
                held = _backend_try(target, scope, thread_id, 0.0)
            if held is not None:
                return attempt.taken(held)
            if not attempt.left():
                raise attempt.busy()
            await asyncio.sleep(attempt.next_pause())
    except BaseException:
        attempt.give_up(locally_held=True)
        raise


def _key_of(target: LeaseTarget, scope: str, thread_id: str) -> _Key:
    return (target.kind, target.where, scope, thread_id)


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
            conn = _pg_connection(target.where, reuse=False)[0]
        for attempt in attempts:
            try:
                got = _pg_try(conn, _advisory_key(scope, attempt.thread_id), attempt.left())
            except psycopg.Error as exc:
                raise StorageError(
                    f"PostgreSQL failed while taking the threads' leases ({type(exc).__name__}); retry"
                ) from exc
            if not got:
                raise attempt.busy()
        yield
    finally:
        if conn is not None:
            conn.close()  # the server drops every advisory lock of the session
        for attempt in attempts:
            attempt.give_up(locally_held=True)


@contextlib.contextmanager
def thread_lease(
    target: LeaseTarget, thread_id: str, *, scope: Scope, timeout: float = DEFAULT_LEASE_TIMEOUT
) -> Iterator[ThreadLease]:
    """Hold the lease of ``thread_id`` at ``target`` (its database) for the block (waiting up to ``timeout`` s);
    the block gets the :class:`ThreadLease` to verify before each write. An id that is not valid text (a
    lone surrogate, NUL, empty) is refused here, before anything is taken or written."""
    check_label(thread_id, "thread_id")
    lease = _acquire(target, scope, thread_id, timeout)
    try:
        yield lease
    finally:
        lease.release()


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
    target: LeaseTarget, thread_id: str, *, scope: Scope, timeout: float = DEFAULT_LEASE_TIMEOUT
) -> AsyncIterator[ThreadLease]:
    """Async version of :func:`thread_lease`."""
    check_label(thread_id, "thread_id")
    lease = await _aacquire(target, scope, thread_id, timeout)
    try:
        yield lease
    finally:
        if target.kind == "postgres":  # a round trip to the server: off the event loop
            await asyncio.get_running_loop().run_in_executor(_executor(), lease.release)
        else:
            lease.release()
