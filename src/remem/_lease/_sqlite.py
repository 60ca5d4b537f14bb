"""SQLite leases: one byte of the sidecar file ``<database>-lease`` per thread, locked with an
open-file-description lock (``F_OFD_SETLK``; POSIX ``lockf`` where Linux's is missing). See :mod:`remem._lease`.

This process's open lease files are its own: a child of ``fork`` closes the descriptors it inherited
(their locks are the parent's) and opens its own."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remem._files import make_private_file
from remem._lease._fence import bump_sqlite, lease_key
from remem._lease_target import LeaseTarget
from remem._sqlite import BUSY_TIMEOUT_MS, storage_error
from remem.errors import StorageError

if TYPE_CHECKING:
    from remem._lease._core import Held

__all__ = ["ThreadLeaseFile", "close_idle_connection", "retain_idle_connection", "try_lease"]


class _Files:
    """The lease files this process has open, by database path."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.open: dict[str, ThreadLeaseFile] = {}
        self.retained: dict[str, int] = {}  # database -> savers and stores that keep its connection idle
        self.idle: dict[str, sqlite3.Connection] = {}  # the fencing tokens' connection, kept between leases


_files = _Files()
_inherited: list[Any] = []  # the parent's database connections, never used nor closed in a child


def _reset_after_fork() -> None:
    # An inherited lease file descriptor shares the parent's open file description, whose OFD locks are the
    # parent's: the child closes it (the parent's locks stay: its own descriptor still refers to them), else a
    # parent that dies would leave its leases held by the child, and opens its own.
    global _files
    old = _files
    inherited, _files = _files.open, _Files()
    for file in inherited.values():
        with contextlib.suppress(OSError):
            os.close(file.fd)
    # SQLite connections must not cross a fork: closing one here could undo the parent's file locks
    _inherited.append([file.db for file in inherited.values()])
    _inherited.append(old.idle)


os.register_at_fork(after_in_child=_reset_after_fork)


def _offset(scope: str, thread_id: str) -> int:
    digest = hashlib.blake2b(f"remem:{scope}:{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2  # a non-negative file offset (off_t is signed 64-bit)


_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)  # Linux; elsewhere POSIX locks (lockf)
_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid (0 for an OFD lock)


class ThreadLeaseFile:
    """A lease file open in this process, the leases held on it, and which file it is (device, inode)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd, self.users = path, fd, 0
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self.db: sqlite3.Connection | None = None  # the database's, for the fencing tokens (opened once)
        self.db_mutex = threading.Lock()

    def bump(self, database: str, key: int) -> int:
        """Move the fencing token of ``key`` on in ``database`` (:mod:`._fence`); its new value."""
        with self.db_mutex:
            try:
                if self.db is None:
                    self.db = sqlite3.connect(
                        database,
                        isolation_level=None,
                        check_same_thread=False,
                        timeout=BUSY_TIMEOUT_MS / 1000,
                    )
                    # as the savers and stores: a commit waits for no fsync in WAL mode (a power loss
                    # that drops it also ends the holder that read it)
                    self.db.execute("PRAGMA synchronous = NORMAL")
                return bump_sqlite(self.db, key)
            except sqlite3.Error as exc:
                raise storage_error(exc, where=database, doing="taking the thread's lease") from exc

    def close(self) -> None:
        os.close(self.fd)
        if self.db is not None:
            self.db.close()

    def current(self) -> bool:
        """Whether ``path`` still names the file this descriptor holds (not deleted, not replaced)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity


def _open_lease_file(path: str) -> ThreadLeaseFile:
    """The lease file of the database at ``path``, opened if this process has it open for no lease."""
    with _files.mutex:
        file = _files.open.get(path)
        if file is None:
            lease_path = Path(path + "-lease")
            try:
                make_private_file(lease_path)
                file = ThreadLeaseFile(lease_path, os.open(lease_path, os.O_RDWR))
                file.db = _files.idle.pop(path, None)
            except OSError as exc:
                raise StorageError(
                    f"cannot open the lease file {lease_path} ({exc}); check that its folder is writable"
                ) from exc
            _files.open[path] = file
        file.users += 1
        return file


def _close_lease_file(path: str, file: ThreadLeaseFile, *, stale: bool = False) -> None:
    """One lease of ``file`` fewer; closed when it holds none (``stale``: never opened again)."""
    with _files.mutex:
        file.users -= 1
        if stale and _files.open.get(path) is file:
            del _files.open[path]
        if file.users > 0:
            return
        if _files.open.get(path) is file:
            del _files.open[path]
        if file.db is not None and _files.retained.get(path) and path not in _files.idle:
            _files.idle[path], file.db = file.db, None  # for the next lease of this database
    file.close()


def retain_idle_connection(target: LeaseTarget) -> None:
    """Keep the connection that writes ``target``'s fencing tokens open between leases, until as many
    :func:`close_idle_connection` calls: what a saver or store of ``from_conn_string`` does while it is
    open (SQLite keeps that connection's descriptor of the file while the store's is open anyway)."""
    with _files.mutex:
        _files.retained[target.where] = _files.retained.get(target.where, 0) + 1


def close_idle_connection(target: LeaseTarget) -> None:
    """One :func:`retain_idle_connection` fewer; with none left, the idle connection is closed."""
    with _files.mutex:
        left = _files.retained.pop(target.where, 0) - 1
        if left > 0:
            _files.retained[target.where] = left
            return
        idle = _files.idle.pop(target.where, None)
    if idle is not None:
        idle.close()


def _byte_lock(fd: int, offset: int, exclusive: bool) -> None:
    """Lock (or unlock) one byte without waiting; BlockingIOError / PermissionError when it is taken."""
    if _OFD_SETLK is None:
        fcntl.lockf(
            fd, (fcntl.LOCK_EX | fcntl.LOCK_NB) if exclusive else fcntl.LOCK_UN, 1, offset, os.SEEK_SET
        )
        return
    kind = fcntl.F_WRLCK if exclusive else fcntl.F_UNLCK
    fcntl.fcntl(fd, _OFD_SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0))


def try_lease(target: LeaseTarget, scope: str, thread_id: str, fence: bool = True) -> Held | None:
    """One try at the lease; ``fence``: move its fencing token on (else its one write does)."""
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
            try:
                token = file.bump(target.where, lease_key(scope, thread_id)) if fence else None
            except BaseException:
                _byte_lock(file.fd, offset, False)
                _close_lease_file(target.where, file)
                raise
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

    return release, file.current, token
