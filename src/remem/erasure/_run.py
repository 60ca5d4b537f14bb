"""One erasure driven through its journal entry: plan, store, checkpoints, usage and jobs, scrub, compact.

See :mod:`remem.erasure` for the steps and what each covers.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import glob
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from remem._clock import now_iso
from remem._lease import DEFAULT_LEASE_TIMEOUT, thread_leases
from remem.checkpoint import checkpointer_from_url, list_threads
from remem.checkpoint._targets import checkpointer_lease_target
from remem.erasure import _journal
from remem.erasure._journal import JournalEntry
from remem.erasure._scopes import ForgetReport, delete_scope, store_scope, threads_of_user
from remem.errors import ErasureIncompleteError, RememRuntimeError
from remem.jobs import forget_jobs
from remem.layout import escape_label, id_of_tenant, is_tenant_id, tenant_id, thread_id_of, thread_meta
from remem.store import Compaction, RememStoreBase, Statements
from remem.store._targets import store_lease_target
from remem.usage import forget_usage

__all__ = ["ErasureReport", "Run", "describe", "fill", "plan"]

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


def describe(scope: dict[str, Any] | None) -> str:
    if not scope:
        return "names removed"
    of = f" of tenant {scope['tenant']}" if "tenant" in scope else ""
    if "user_id" in scope:
        return f"user {scope['user_id']}{of}"
    if "thread_id" in scope:
        return f"thread {scope['thread_id']}{of}"
    return "namespace " + ".".join(scope["namespace"]) + of


def fill(template: str, placeholder: str, value: str) -> list[str]:
    # Split first: the value stands for one whole label, whatever it contains (escaped as remem's own).
    return [escape_label(value) if label == placeholder else label for label in template.split(".")]


def plan(store: RememStoreBase, url: str, scope: dict[str, Any]) -> dict[str, Any]:
    """What the scope covers beyond the store's own rule: threads' checkpoints and registered namespaces."""
    tenant = scope.get("tenant")
    # the registered templates are the untenanted app's: a tenant's erasure covers remem's layout only
    registry = [] if tenant is not None else store.run_statements(_journal.templates)
    threads: list[str] = []
    namespaces: list[list[str]] = []
    if "thread_id" in scope:
        thread = scope["thread_id"]
        threads = [thread]
        namespaces = [
            fill(t, "{thread_id}", thread) for k, t in registry if k == "namespace" and "{thread_id}" in t
        ]
    elif "user_id" in scope:
        user = scope["user_id"]
        found = set(threads_of_user(store, user, tenant=tenant))
        patterns = [t.replace("{user_id}", glob.escape(user)) for k, t in registry if k == "thread"]
        with checkpointer_from_url(url) as saver:
            for stored in list_threads(saver):
                thread = id_of_tenant(stored, tenant=tenant)  # the tenant's own ids; another's: None
                if thread is None:
                    continue
                if thread in found:
                    continue
                if tenant is None and is_tenant_id(thread):  # a tenant's thread is not the app's to match
                    continue
                if any(fnmatch.fnmatchcase(thread, p) for p in patterns):
                    found.add(thread)
                    continue
                latest = saver.get_tuple({"configurable": {"thread_id": stored, "checkpoint_ns": ""}})
                if latest is not None and latest.metadata.get("user_id") == user:
                    found.add(thread)
        threads = sorted(found)
        namespaces = [
            fill(t, "{user_id}", user) for k, t in registry if k == "namespace" and "{user_id}" in t
        ]
    return {"scope": scope, "threads": threads, "namespaces": namespaces, "counted": {}, "erased_threads": []}


def _threads_taken_whole(report: ForgetReport, tenant: str | None) -> list[str]:
    # A thread erased whole loses its metadata item.
    threads = (thread_id_of(ns, tenant=tenant) for ns, _ in report.item_keys)
    return sorted(
        {
            t
            for (ns, _), t in zip(report.item_keys, threads, strict=True)
            if t is not None and ns == thread_meta(t, tenant=tenant)
        }
    )


def _checkpoints_per_thread(saver: Any, threads: list[str]) -> dict[str, int]:
    """How many checkpoints each of ``threads`` holds (absent: none)."""
    stats = getattr(saver, "stats", None)
    if callable(stats):  # remem's savers count them in SQL
        return {t.thread_id: t.checkpoints for t in stats().threads if t.thread_id in threads}
    counts = {t: sum(1 for _ in saver.list({"configurable": {"thread_id": t}})) for t in threads}
    return {t: n for t, n in counts.items() if n}


def _usage_and_jobs(backend: str, user: str | None, threads: list[str]) -> Statements[int]:
    """The ledger's rows, then the queued jobs (remem.jobs) of the user and threads, in one transaction."""
    removed = yield from forget_usage(backend, user_id=user, thread_ids=threads)
    yield from forget_jobs(backend, user_id=user, thread_ids=threads)
    return removed


def _store_scope(scope: dict[str, Any]) -> dict[str, Any]:
    if "namespace" in scope:
        return {**scope, "namespace": tuple(scope["namespace"])}
    return dict(scope)


# ---------------------------------------------------------------- running an entry


class Run:
    """Drives one journal entry from its first step not done to its close; ``on_step`` is called with each
    step's name as it is reached, and with "saved" after every journal write (the crash tests' seam)."""

    def __init__(
        self,
        store: RememStoreBase,
        url: str,
        entry: JournalEntry,
        wait: float,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        self.store, self.url, self.entry, self.wait = store, url, entry, wait
        self.backend = store.dialect.name
        self.on_step = on_step
        self.scope_text = describe(entry.plan.get("scope"))
        self.tenant: str | None = (entry.plan.get("scope") or {}).get("tenant")
        self.compaction = Compaction(False, "not reached", [])

    def stored(self, ids: list[str]) -> list[str]:
        """The checkpointer's and the ledger's ids of the scope's threads (or user)."""
        return [tenant_id(i, tenant=self.tenant) for i in ids]

    def reached(self, step: str) -> None:
        if self.on_step is not None:
            self.on_step(step)

    def save(self, entry: JournalEntry) -> None:
        entry.revision = self.store.run_statements(lambda backend: _journal.save(backend, entry))
        self.entry = entry
        self.reached("saved")

    def step(self) -> JournalEntry:
        return copy.deepcopy(self.entry)

    def committed(self, written: list[tuple[JournalEntry, int]]) -> None:
        """The entry a transaction wrote and committed becomes the current one."""
        entry, revision = written[-1]
        entry.revision = revision
        self.entry = entry
        self.reached("saved")

    def run(self) -> ErasureReport:
        entry = self.step()
        entry.totals["runs"] = entry.totals.get("runs", 0) + 1
        self.save(entry)
        self.reached("planned")
        try:
            if self.entry.state == "open":
                with checkpointer_from_url(self.url) as saver, self._fenced(saver):
                    self._store_steps()
                    self.reached("store")
                    self._checkpoint_steps(saver)
                    self.reached("checkpoints")
                self._ingestions_step()
                self._usage_step()
                self._scrub()
            self.reached("compacting")
            self.compaction = self.store.compact(wait=self.wait)
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
        # a tenant's checkpoint leases are its checkpoint threads'; its memory leases its own ids (the
        # memory client's, whose store puts the tenant's slot in namespaces only)
        stored = self.stored(threads)
        with (
            thread_leases(
                checkpointer_lease_target(saver), stored, scope="checkpoint", timeout=DEFAULT_LEASE_TIMEOUT
            ),
            thread_leases(
                store_lease_target(self.store), threads, scope="memory", timeout=DEFAULT_LEASE_TIMEOUT
            ),
        ):
            yield

    def _store_steps(self) -> None:
        plan = self.entry.plan
        steps = [("store", _store_scope(plan["scope"]))]
        steps += [(f"ns:{i}", {"namespace": tuple(ns)}) for i, ns in enumerate(plan["namespaces"])]
        for name, scope in steps:
            if name not in self.entry.done:
                written: list[tuple[JournalEntry, int]] = []
                record = functools.partial(self._record, name, written)
                delete_scope(self.store, store_scope(**scope), then=record)
                self.committed(written)

    def _record(
        self, name: str, written: list[tuple[JournalEntry, int]], report: ForgetReport
    ) -> Statements[None]:
        """The entry after store step ``name``, written in the transaction that deletes."""
        entry = self.step()
        for key in _COUNTS:
            entry.totals[key] = entry.totals.get(key, 0) + int(getattr(report, key))
        if name == "store" and "user_id" in entry.plan["scope"]:
            known = entry.plan["threads"]
            known += [t for t in _threads_taken_whole(report, self.tenant) if t not in known]
        entry.done.append(name)
        revision = yield from _journal.save(self.backend, entry)
        written.append((entry, revision))

    def _checkpoint_steps(self, saver: Any) -> None:
        threads = self.entry.plan["threads"]
        todo = [i for i in range(len(threads)) if f"cp:{i}" not in self.entry.done]
        if not todo:
            return
        held = _checkpoints_per_thread(saver, self.stored([threads[i] for i in todo]))
        for i in todo:
            thread = threads[i]
            (stored,) = self.stored([thread])
            if stored in held:  # the count first: a kill after the delete must not lose it
                entry = self.step()
                entry.plan["counted"][str(i)] = held[stored]
                self.save(entry)
                saver.delete_thread(stored)
            entry = self.step()
            count = int(entry.plan["counted"].get(str(i), 0))
            if count:
                entry.totals["threads"] = entry.totals.get("threads", 0) + 1
                entry.totals["checkpoints"] = entry.totals.get("checkpoints", 0) + count
                entry.plan["erased_threads"].append(thread)
            entry.done.append(f"cp:{i}")
            self.save(entry)

    def _ingestions_step(self) -> None:
        """The user's and the threads' ids out of the ingestion journal (remem.ingestion). Outside the fence:
        an undo takes its ingestion's lease before its threads' leases, so this takes them in that order
        too. Rewriting is idempotent, so the step is marked done after it."""
        if "ingestions" in self.entry.done:
            return
        from remem.ingestion import forget_in_journal  # same layer; imported late, it imports the client

        scope = self.entry.plan["scope"]
        if "namespace" not in scope:
            threads = list(self.entry.plan["threads"])
            forget_in_journal(
                self.store,
                user_id=scope.get("user_id"),
                thread_ids=threads,
                timeout=DEFAULT_LEASE_TIMEOUT,
                tenant=self.tenant,
            )
        entry = self.step()
        entry.done.append("ingestions")
        self.save(entry)

    def _usage_step(self) -> None:
        """The ledger's rows and queued jobs of the scope's user and threads, deleted in the transaction that
        marks the step done."""
        if "usage" in self.entry.done:
            return
        scope = self.entry.plan["scope"]
        user, threads = scope.get("user_id"), self.stored(self.entry.plan["threads"])
        if user is not None:
            (user,) = self.stored([user])
        if user is None and not threads:  # a namespace: no call is recorded by namespace
            entry = self.step()
            entry.done.append("usage")
            self.save(entry)
            return
        written: list[tuple[JournalEntry, int]] = []

        def statements(backend: str) -> Statements[None]:
            removed = yield from _usage_and_jobs(backend, user, threads)
            entry = self.step()
            entry.totals["usage_rows"] = entry.totals.get("usage_rows", 0) + removed
            entry.done.append("usage")
            revision = yield from _journal.save(backend, entry)
            written.append((entry, revision))

        self.store.run_statements(statements)
        self.committed(written)

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
