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

A lease lost after that check, before the write commits, is caught by the thread's fencing token
(:mod:`._fence`): taking a lease in a database moves the thread's number on there, and each write under
the lease (a checkpoint and its pending writes, a memory append on remem's stores, an ingestion undo's
step) reads it in its own transaction (:meth:`ThreadLease.fenced`) and writes nothing once another
writer has moved it. A lease taken for one write (a bare run's checkpoint) moves the number on in that
write's transaction instead, so taking it writes nothing. On SQLite the number is moved on through a
connection of the lease module's own, kept open between leases while a saver or store of
``from_conn_string`` on that file is (:func:`retain_idle_connections`), else closed with the lease file.

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

from remem._lease._core import (
    DEFAULT_LEASE_TIMEOUT,
    TURN_LEASE_KEY,
    LeaseTarget,
    Scope,
    ThreadLease,
    atake_lease,
    athread_lease,
    carried_lease,
    carry_lease,
    close_idle_connections,
    lease_waits,
    retain_idle_connections,
    take_lease,
    thread_lease,
    thread_leases,
    write_lease,
)

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
