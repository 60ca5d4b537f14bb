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
4. **usage**: the usage ledger's rows of the user and of the planned threads, and those scopes' running
   totals (:func:`remem.usage.forget_usage`), committed together with the step's mark and count.
5. **scrub**: the entry forgets the names it held (user, threads, namespaces); only counts stay.
6. **compact**: SQLite: the keyword index merged, VACUUM, and the WAL checkpointed and truncated, which
   waits (``wait`` seconds) for connections that still read old pages. PostgreSQL: VACUUM FULL of every
   ``remem_`` table and of the column statistics, after waiting for transactions that can still see the
   deleted rows; a rewrite is checked (new relation files, no dead row kept), never assumed.
7. **close**: the entry keeps its id, times and totals, no name.

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

Registration (kept in the database, so that ``remem forget`` in another process knows it): namespace
templates are dotted prefixes with ``{user_id}`` (used by user erasures) or ``{thread_id}`` (used by thread
erasures) standing for one whole label; thread templates are shell-style patterns (``*``, ``?``) with
``{user_id}``. Registering is idempotent.

What can outlive an erasure is listed in every report (``outlives``): on PostgreSQL the WAL until it is
recycled, archives, backups and replicas; on both, copies made before and disk blocks not yet reused.
Other processes' in-memory caches (an app's embedder cache) are theirs to drop.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import glob
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from remem._clock import now_iso
from remem._lease import DEFAULT_LEASE_TIMEOUT, thread_leases
from remem._url import display_url, parse_database_url
from remem.checkpoint import checkpointer_from_url, list_threads
from remem.errors import (
    ArgumentTypeError,
    ConfigError,
    ErasureIncompleteError,
    NotFoundError,
    RememRuntimeError,
    RememUsageError,
)
from remem.jobs import forget_jobs
from remem.layout import escape_label, thread_id_of, thread_meta
from remem.store import ForgetReport, RememStoreBase, open_store
from remem.store import _erasure as journal
from remem.store._exec import Program, Sql
from remem.usage import UsageForgetting, forget_usage

__all__ = [
    "ErasureReport",
    "erase",
    "finish_erasures",
    "register_user_data",
    "registered_user_data",
    "unfinished_erasures",
]

_on_step: Callable[[str], None] | None = None
"""Called with each step's name as it is reached ("planned", "store", "checkpoints", "compacting"), and with
"saved" after every journal write: the seam crash tests use to stop a real process at a chosen point.
Leave it None."""

_COUNTS = ("items", "vectors", "keyword_rows", "namespaces", "queued")


@dataclass
class ErasureReport:
    """What one erasure removed in total (over every run it took) and whether storage was compacted."""

    erasure_id: str
    scope: str
    store: ForgetReport
    checkpoint_threads: list[str] = field(default_factory=list)
    threads: int = 0
    checkpoints: int = 0
    registered_namespaces: list[str] = field(default_factory=list)
    usage_rows: int = 0
    runs: int = 1
    compacted: bool = False
    compaction: str = "not reached"
    outlives: list[str] = field(default_factory=list)

    def as_rows(self) -> list[tuple[str, str]]:
        rows = [(k, v) for k, v in self.store.as_rows() if k not in ("scopes", "storage compacted")]
        named = ", ".join(self.checkpoint_threads) or ("none" if not self.threads else "(names removed)")
        return [
            ("erasure", f"{self.erasure_id} ({self.scope})"),
            *rows,
            ("registered namespaces erased", ", ".join(self.registered_namespaces) or "none"),
            ("threads whose checkpoints were deleted", f"{self.threads}: {named}"),
            ("checkpoints", str(self.checkpoints)),
            ("usage ledger rows", str(self.usage_rows)),
            ("runs it took", str(self.runs)),
            ("storage compacted", ("yes: " if self.compacted else "NO: ") + self.compaction),
            ("can still hold copies", "; ".join(self.outlives) or "-"),
        ]

    @property
    def removed(self) -> int:
        return self.store.items + self.checkpoints + self.usage_rows


# ---------------------------------------------------------------- scope and plan


def _scope(
    user_id: str | None, thread_id: str | None, namespace: str | Sequence[str] | None
) -> dict[str, Any]:
    given = [x for x in (user_id, thread_id, namespace) if x is not None]
    if len(given) != 1:
        raise ConfigError("forget needs exactly one of user_id=, thread_id= or namespace=")
    if user_id is not None:
        scope: dict[str, Any] = {"user_id": user_id}
    elif thread_id is not None:
        scope = {"thread_id": thread_id}
    else:
        scope = {"namespace": namespace.split(".") if isinstance(namespace, str) else list(namespace or ())}
    journal.check_scope(**_store_scope(scope))  # refuse a bad label before anything is written
    return scope


def _store_scope(scope: dict[str, Any]) -> dict[str, Any]:
    if "namespace" in scope:
        return {"namespace": tuple(scope["namespace"])}
    return dict(scope)


def _describe(scope: dict[str, Any] | None) -> str:
    if not scope:
        return "names removed"
    if "user_id" in scope:
        return f"user {scope['user_id']}"
    if "thread_id" in scope:
        return f"thread {scope['thread_id']}"
    return "namespace " + ".".join(scope["namespace"])


def _digest(scope: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()


def _fill(template: str, placeholder: str, value: str) -> list[str]:
    # Split first: the value stands for one whole label, whatever it contains (escaped as remem's own).
    return [escape_label(value) if label == placeholder else label for label in template.split(".")]


def _plan(store: RememStoreBase, url: str, scope: dict[str, Any]) -> dict[str, Any]:
    """What the scope covers beyond the store's own rule: threads' checkpoints and registered namespaces."""
    registry = journal.run_journal(store, journal.registry_program, store.dialect)
    threads: list[str] = []
    namespaces: list[list[str]] = []
    if "thread_id" in scope:
        thread = scope["thread_id"]
        threads = [thread]
        namespaces = [
            _fill(t, "{thread_id}", thread) for k, t in registry if k == "namespace" and "{thread_id}" in t
        ]
    elif "user_id" in scope:
        user = scope["user_id"]
        found = set(journal.run_journal(store, journal.meta_threads_program, store.dialect, user))
        patterns = [t.replace("{user_id}", glob.escape(user)) for k, t in registry if k == "thread"]
        with checkpointer_from_url(url) as saver:
            for thread in list_threads(saver):
                if thread in found or any(fnmatch.fnmatchcase(thread, p) for p in patterns):
                    found.add(thread)
                    continue
                latest = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
                if latest is not None and latest.metadata.get("user_id") == user:
                    found.add(thread)
        threads = sorted(found)
        namespaces = [
            _fill(t, "{user_id}", user) for k, t in registry if k == "namespace" and "{user_id}" in t
        ]
    return {"scope": scope, "threads": threads, "namespaces": namespaces, "counted": {}, "erased_threads": []}


def _threads_taken_whole(report: ForgetReport) -> list[str]:
    # A thread erased whole loses its metadata item.
    threads = (thread_id_of(ns) for ns, _ in report.item_keys)
    return sorted(
        {
            t
            for (ns, _), t in zip(report.item_keys, threads, strict=True)
            if t is not None and ns == thread_meta(t)
        }
    )


def _checkpoints_per_thread(saver: Any, threads: list[str]) -> dict[str, int]:
    """How many checkpoints each of ``threads`` holds (absent: none)."""
    stats = getattr(saver, "stats", None)
    if callable(stats):  # remem's savers count them in SQL
        return {t.thread_id: t.checkpoints for t in stats().threads if t.thread_id in threads}
    counts = {t: sum(1 for _ in saver.list({"configurable": {"thread_id": t}})) for t in threads}
    return {t: n for t, n in counts.items() if n}


def _as_program(forgetting: UsageForgetting) -> Program[int]:
    """The ledger's statements run as a store program (in the store's transaction)."""
    try:
        sql, params, fetch = next(forgetting)
        while True:
            rows = yield Sql(sql, list(params), "all" if fetch else "count")
            sql, params, fetch = forgetting.send(rows if fetch else rows[0][0])
    except StopIteration as done:
        return int(done.value)


def _usage_and_jobs(dialect: str, user: str | None, threads: list[str]) -> Program[int]:
    """The ledger's rows, then the queued jobs (remem.jobs) of the user and threads, in one transaction."""
    removed = yield from _as_program(forget_usage(dialect, user_id=user, thread_ids=threads))
    yield from _as_program(forget_jobs(dialect, user_id=user, thread_ids=threads))
    return removed


# ---------------------------------------------------------------- running an entry


def _reached(step: str) -> None:
    if _on_step is not None:
        _on_step(step)


class _Run:
    """Drives one journal entry from its first step not done to its close."""

    def __init__(self, store: RememStoreBase, url: str, entry: journal.JournalEntry, wait: float) -> None:
        self.store, self.url, self.entry, self.wait = store, url, entry, wait
        self.scope_text = _describe(entry.plan.get("scope"))
        self.compaction = journal.Compaction(False, "not reached", [])

    def save(self, entry: journal.JournalEntry) -> None:
        journal.run_journal(self.store, journal.journal_save_program, self.store.dialect, entry)
        self.entry = entry
        _reached("saved")

    def step(self) -> journal.JournalEntry:
        return copy.deepcopy(self.entry)

    def run(self) -> ErasureReport:
        entry = self.step()
        entry.totals["runs"] = entry.totals.get("runs", 0) + 1
        self.save(entry)
        _reached("planned")
        try:
            if self.entry.state == "open":
                with checkpointer_from_url(self.url) as saver, self._fenced(saver):
                    self._store_steps()
                    _reached("store")
                    self._checkpoint_steps(saver)
                    _reached("checkpoints")
                self._usage_step()
                self._scrub()
            _reached("compacting")
            self.compaction = journal.compact(self.store, wait=self.wait)
        except RememRuntimeError as exc:
            raise ErasureIncompleteError(
                f"erasure {self.entry.id} ({self.scope_text}) stopped: {exc}. What was done is recorded; run "
                "`remem forget` (or erase again) to finish it",
                report=self.report(),
            ) from exc
        if not self.compaction.done:
            raise ErasureIncompleteError(
                f"erasure {self.entry.id} ({self.scope_text}): everything was deleted, but the deleted bytes may "
                f"still be in the database's files: {self.compaction.detail}. The erasure stays open; run "
                "`remem forget` to finish it",
                report=self.report(),
            )
        entry = self.step()
        entry.state, entry.scope_digest, entry.finished_at = "closed", None, now_iso()
        entry.done.append("compact")
        self.save(entry)
        return self.report()

    @contextmanager
    def _fenced(self, saver: Any) -> Iterator[None]:
        """Hold the leases of the planned threads (every checkpoint lease first, then every memory lease:
        the order a turn takes them in, so neither waits for the other in a circle)."""
        threads = self.entry.plan["threads"]
        with (
            thread_leases(saver, threads, scope="checkpoint", timeout=DEFAULT_LEASE_TIMEOUT),
            thread_leases(self.store, threads, scope="memory", timeout=DEFAULT_LEASE_TIMEOUT),
        ):
            yield

    def _store_steps(self) -> None:
        plan = self.entry.plan
        steps = [("store", _store_scope(plan["scope"]))]
        steps += [(f"ns:{i}", {"namespace": tuple(ns)}) for i, ns in enumerate(plan["namespaces"])]
        for name, scope in steps:
            if name not in self.entry.done:
                recorded: list[journal.JournalEntry] = []
                journal.journaled_forget(self.store, functools.partial(self._record, name, recorded), **scope)
                self.entry = recorded[-1]
                _reached("saved")

    def _record(
        self, name: str, recorded: list[journal.JournalEntry], report: ForgetReport
    ) -> journal.JournalEntry:
        """The entry after store step ``name``: written in the transaction that deletes."""
        entry = self.step()
        for key in _COUNTS:
            entry.totals[key] = entry.totals.get(key, 0) + int(getattr(report, key))
        if name == "store" and "user_id" in entry.plan["scope"]:
            known = entry.plan["threads"]
            known += [t for t in _threads_taken_whole(report) if t not in known]
        entry.done.append(name)
        recorded.append(entry)
        return entry

    def _checkpoint_steps(self, saver: Any) -> None:
        threads = self.entry.plan["threads"]
        todo = [i for i in range(len(threads)) if f"cp:{i}" not in self.entry.done]
        if not todo:
            return
        held = _checkpoints_per_thread(saver, [threads[i] for i in todo])
        for i in todo:
            thread = threads[i]
            if thread in held:  # the count first: a kill after the delete must not lose it
                entry = self.step()
                entry.plan["counted"][str(i)] = held[thread]
                self.save(entry)
                saver.delete_thread(thread)
            entry = self.step()
            count = int(entry.plan["counted"].get(str(i), 0))
            if count:
                entry.totals["threads"] = entry.totals.get("threads", 0) + 1
                entry.totals["checkpoints"] = entry.totals.get("checkpoints", 0) + count
                entry.plan["erased_threads"].append(thread)
            entry.done.append(f"cp:{i}")
            self.save(entry)

    def _usage_step(self) -> None:
        """The ledger's rows of the scope's user and threads, deleted in the transaction that marks it done."""
        if "usage" in self.entry.done:
            return
        scope = self.entry.plan["scope"]
        user, threads = scope.get("user_id"), list(self.entry.plan["threads"])
        if user is None and not threads:  # a namespace: no call is recorded by namespace
            entry = self.step()
            entry.done.append("usage")
            self.save(entry)
            return

        recorded: list[journal.JournalEntry] = []

        def record(removed: int) -> journal.JournalEntry:
            entry = self.step()
            entry.totals["usage_rows"] = entry.totals.get("usage_rows", 0) + removed
            entry.done.append("usage")
            recorded.append(entry)
            return entry

        dialect = self.store.dialect
        journal.run_journal(
            self.store,
            journal.journaled_program,
            dialect,
            lambda: _usage_and_jobs(dialect.name, user, threads),
            record,
        )
        self.entry = recorded[-1]
        _reached("saved")

    def _scrub(self) -> None:
        self.erased_threads = list(self.entry.plan["erased_threads"])
        self.namespaces = [".".join(ns) for ns in self.entry.plan["namespaces"]]
        entry = self.step()
        entry.state = "compacting"
        entry.plan = {"scope": None, "threads": [], "namespaces": [], "counted": {}, "erased_threads": []}
        entry.done.append("scrub")
        self.save(entry)

    def report(self) -> ErasureReport:
        totals = self.entry.totals
        store = ForgetReport(scopes=[self.scope_text], compacted=self.compaction.done)
        for key in _COUNTS:
            setattr(store, key, int(totals.get(key, 0)))
        plan = self.entry.plan
        return ErasureReport(
            erasure_id=self.entry.id,
            scope=self.scope_text,
            store=store,
            checkpoint_threads=list(getattr(self, "erased_threads", plan.get("erased_threads") or [])),
            threads=int(totals.get("threads", 0)),
            usage_rows=int(totals.get("usage_rows", 0)),
            checkpoints=int(totals.get("checkpoints", 0)),
            registered_namespaces=getattr(
                self, "namespaces", [".".join(ns) for ns in plan.get("namespaces") or []]
            ),
            runs=int(totals.get("runs", 1)),
            compacted=self.compaction.done,
            compaction=self.compaction.detail,
            outlives=list(self.compaction.outlives),
        )


# ---------------------------------------------------------------- public API


@contextmanager
def _open(url: str) -> Iterator[RememStoreBase]:
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        raise ConfigError("memory:// keeps nothing between runs; name the database to erase from")
    if parsed.kind == "sqlite" and not parsed.sqlite_path.is_file():
        raise NotFoundError(f"there is no database at {display_url(url)}; check --db or REMEM_DATABASE_URL")
    with open_store(url) as store:
        yield store


def erase(
    url: str,
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    namespace: str | Sequence[str] | None = None,
    wait: float = 30.0,
) -> ErasureReport:
    """Erase a user's, a thread's or a namespace's data from the database at ``url``, checkpoints included,
    then compact; an erasure of the same scope that a crash or a failure left open is finished instead.

    ``wait`` bounds, in seconds, how long compaction waits for other connections that still read the old
    rows. Raises :class:`~remem.errors.ErasureIncompleteError` (with ``.report``) when it could not finish.
    """
    scope = _scope(user_id, thread_id, namespace)
    wait = _check_wait(wait)
    with _open(url) as store:
        digest = _digest(scope)
        entries = journal.run_journal(store, journal.journal_open_program, store.dialect)
        entry = next((e for e in entries if e.scope_digest == digest), None)
        if entry is None:
            plan = _plan(store, url, scope)
            entry = journal.JournalEntry(uuid.uuid4().hex[:12], now_iso(), "open", digest, plan)
        return _Run(store, url, entry, wait).run()


def finish_erasures(url: str, *, wait: float = 30.0) -> list[ErasureReport]:
    """Finish every erasure left open in the database at ``url``, oldest first; their reports (none: [])."""
    wait = _check_wait(wait)
    with _open(url) as store:
        entries = journal.run_journal(store, journal.journal_open_program, store.dialect)
        return [_Run(store, url, entry, wait).run() for entry in entries]


def unfinished_erasures(url: str) -> int:
    """How many erasures are open (recorded, not yet finished) in the database at ``url``."""
    with _open(url) as store:
        return len(journal.run_journal(store, journal.journal_open_program, store.dialect))


def _templates(name: str, given: Sequence[str]) -> list[str]:
    # One text where a list belongs would otherwise be read as a list of its characters.
    items = None if isinstance(given, str) or not isinstance(given, Iterable) else list(given)
    if items is None or not all(isinstance(t, str) for t in items):
        raise ArgumentTypeError(f"{name} takes a list of texts, e.g. {name}=[...]; got {given!r}")
    return items


def _check_wait(wait: float) -> float:
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise ArgumentTypeError(f"wait is how many seconds compaction may wait: a number, got {wait!r}")
    if wait < 0:
        raise RememUsageError(f"wait is how many seconds compaction may wait: 0 or more, got {wait!r}")
    return float(wait)


def register_user_data(url: str, *, namespaces: Sequence[str] = (), threads: Sequence[str] = ()) -> None:
    """Record where an app keeps per-user (or per-thread) data, so that every later erasure covers it.

    ``namespaces``: dotted prefixes with ``{user_id}`` or ``{thread_id}`` as one label, e.g.
    ``"crm.{user_id}"``, ``"app.notes.{thread_id}"``. ``threads``: thread-id patterns with ``{user_id}``,
    e.g. ``"support-{user_id}-*"``. Kept in the database at ``url``. An id fills its label escaped by
    ``remem.layout.escape_label`` (itself, unless it holds ``.`` or reads as an escaped id).
    """
    namespaces, threads = _templates("namespaces", namespaces), _templates("threads", threads)
    for template in namespaces:
        labels = template.split(".")
        if not any(label in ("{user_id}", "{thread_id}") for label in labels) or "" in labels:
            raise ConfigError(
                f"namespace template {template!r} needs a label that is exactly {{user_id}} or {{thread_id}}, "
                "e.g. 'crm.{user_id}'"
            )
        sample = _fill(".".join(_fill(template, "{user_id}", "u")), "{thread_id}", "t")
        journal.check_scope(namespace=tuple(sample))
    for template in threads:
        if "{user_id}" not in template:
            raise ConfigError(f"thread pattern {template!r} needs {{user_id}}, e.g. 'support-{{user_id}}-*'")
    with _open(url) as store:
        journal.run_journal(store, journal.registry_add_program, store.dialect, "namespace", list(namespaces))
        journal.run_journal(store, journal.registry_add_program, store.dialect, "thread", list(threads))


def registered_user_data(url: str) -> dict[str, list[str]]:
    """The templates :func:`register_user_data` recorded: ``{"namespaces": [...], "threads": [...]}``."""
    with _open(url) as store:
        rows = journal.run_journal(store, journal.registry_program, store.dialect)
    return {
        "namespaces": [t for k, t in rows if k == "namespace"],
        "threads": [t for k, t in rows if k == "thread"],
    }
