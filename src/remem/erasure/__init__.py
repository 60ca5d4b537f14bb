"""Erasure that always finishes: a user's, a thread's or a namespace's data, checkpoints included.

    erase(url, user_id="maya")          # or thread_id="t-1", or namespace="crm.maya"
    finish_erasures(url)                # finish what a crash or a failure left open
    register_user_data(url, namespaces=["crm.{user_id}"], threads=["support-{user_id}-*"])

Each erasure is recorded in a journal table of the same database (``remem_erasures``) before anything is
deleted, and each step is marked there when it is done:

1. **plan**: the scope, the threads whose checkpoints go, the registered namespaces that go.
2. **store**: items, vectors, keyword rows, queued extraction state (and this process's cached embeddings);
   each store step commits together with its mark in the journal, so its counts are never lost or doubled.
3. **checkpoints** of each planned thread (their count is written to the journal before they are deleted).
   Then **ingestions**: the user's and the threads' ids leave the ingestion journal
   (:func:`remem.ingestion.forget_in_journal`; an entry left naming nothing is deleted).
4. **usage**: the usage ledger's rows of the user and of the planned threads, and those scopes' running
   totals (:func:`remem.usage.forget_usage`), and their queued jobs (:func:`remem.jobs.forget_jobs`),
   committed together with the step's mark and count.
5. **scrub**: the entry forgets the names it held (user, threads, namespaces); only counts stay.
6. **compact**: SQLite: the keyword index merged, VACUUM, and the WAL checkpointed and truncated, which
   waits (``wait`` seconds) for connections that still read old pages. PostgreSQL: VACUUM FULL of every
   ``remem_`` table and of the column statistics, after waiting for transactions that can still see the
   deleted rows; a rewrite is checked (new relation files, no dead row kept), never assumed.
7. **close**: the entry keeps its id, times and totals, no name.

Where it lives: :mod:`remem.erasure._scopes` says what a scope covers in the store (and the store-only
:func:`forget`), :mod:`remem.erasure._journal` holds the journal's and the registry's statements,
:mod:`remem.erasure._run` drives an entry through its steps. The store only deletes what it is told
(:meth:`remem.store.RememStoreBase.delete_items`, with the journal's write in the same transaction) and
compacts (:meth:`~remem.store.RememStoreBase.compact`); the ledger and the job queue supply their
forgetting statements (:func:`remem.usage.forget_usage`, :func:`remem.jobs.forget_jobs`).

Steps 2 and 3 run holding the lease of every planned thread (its checkpoint lease, then its memory
lease: :mod:`remem._lease`), so an erasure fences the writers that began before it: a turn in flight
(:func:`remem.run_turn`) or a memory append finishes first (the erasure waits up to
``DEFAULT_LEASE_TIMEOUT`` seconds for each), and what starts later finds the thread erased. A bare
``invoke`` (no ``run_turn``) that read the thread before the erasure holds no lease between its writes:
its next checkpoint, whose parent the erasure deleted, is refused (:class:`~remem.errors.ThreadBusyError`)
instead of writing the erased history back.

A run that is killed or fails leaves the entry open. The next ``erase`` with the same scope, or
``finish_erasures`` (``remem forget`` with no scope), goes on from the first step not done and reports the
totals of all runs. An erasure that could not compact raises :class:`~remem.errors.ErasureIncompleteError`
with what was done and what stopped it; it never reports a compaction that did not happen.

What a **user** erasure covers: the store's user scope (``("users", U, ...)``, items under ``("threads",)``
whose ``user_id`` is U, and threads held by U alone whole, U's queued extraction work); the checkpoints of
the threads the memory client registered for U (``("threads", T, "meta")`` names U), of the threads whose
latest checkpoint's metadata has ``user_id`` U (LangGraph copies ``configurable`` values such as
``user_id`` there), of the threads the store took whole, and of the threads whose id matches a pattern
registered with :func:`register_user_data`; and the namespaces registered there.

A **tenant's** scope (``erase(url, thread_id=T, tenant="acme")``, what ``remem serve`` runs for a key's
tenant) is the same scope in the tenant's slot of :mod:`remem.layout` (``("tenants", "acme", ...)``), its
checkpoint threads and ledger ids named by :func:`remem.layout.tenant_id` (``tenants:acme:T``), and the
tenant's ingestion journal; the registered templates below are the untenanted app's and are not used.

Registration (kept in the database, so that ``remem forget`` in another process knows it): namespace
templates are dotted prefixes with ``{user_id}`` (used by user erasures) or ``{thread_id}`` (used by thread
erasures) standing for one whole label; thread templates are shell-style patterns (``*``, ``?``) with
``{user_id}``. Registering is idempotent.

What can outlive an erasure is listed in every report (``outlives``): on PostgreSQL the WAL until it is
recycled, archives, backups and replicas; on both, copies made before and disk blocks not yet reused.
Other processes' in-memory caches (an app's embedder cache) are theirs to drop.
"""

from __future__ import annotations

from collections.abc import Callable

from remem.erasure._api import (
    erase,
    finish_erasures,
    register_user_data,
    registered_user_data,
    unfinished_erasures,
)
from remem.erasure._run import ErasureReport
from remem.erasure._scopes import ForgetReport, aforget, forget

__all__ = [
    "ErasureReport",
    "ForgetReport",
    "aforget",
    "erase",
    "finish_erasures",
    "forget",
    "register_user_data",
    "registered_user_data",
    "unfinished_erasures",
]

_on_step: Callable[[str], None] | None = None
"""Called with each step's name as it is reached ("planned", "store", "checkpoints", "compacting"), and with
"saved" after every journal write: the seam crash tests use to stop a real process at a chosen point.
Leave it None."""
