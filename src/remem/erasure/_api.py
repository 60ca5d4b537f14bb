"""The public functions of :mod:`remem.erasure` (see its docstring): erase, finish, count, register."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from remem._clock import now_iso
from remem._url import display_url, parse_database_url
from remem.erasure import _journal
from remem.erasure._run import ErasureReport, Run, fill, plan
from remem.erasure._scopes import store_scope
from remem.errors import ArgumentTypeError, ConfigError, NotFoundError, RememUsageError
from remem.layout import tenant_id
from remem.store import RememStoreBase, open_store
from remem.usage import forget_usage

__all__ = ["erase", "finish_erasures", "register_user_data", "registered_user_data", "unfinished_erasures"]


def _scope(
    user_id: str | None, thread_id: str | None, namespace: str | Sequence[str] | None, tenant: str | None
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
    # absent without a tenant: an untenanted scope's journal digest is the one it always was
    if tenant is not None:
        tenant_id("", tenant=tenant)  # refuse a tenant no id can name
        scope["tenant"] = tenant
    # refuse a bad label before anything is written
    store_scope(scope.get("user_id"), scope.get("thread_id"), scope.get("namespace"), tenant=tenant)
    return scope


def _digest(scope: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()


def _run(store: RememStoreBase, url: str, entry: _journal.JournalEntry, wait: float) -> ErasureReport:
    from remem import erasure  # the package holds the crash tests' seam, ``remem.erasure._on_step``

    return Run(store, url, entry, wait, erasure._on_step).run()


@contextmanager
def _open(url: str, *, erasing: bool = False) -> Iterator[RememStoreBase]:
    """The store at ``url`` with the journal's tables set up; ``erasing``: a ledger a newer
    remem wrote is refused first, before anything is written (an erasure must not delete rows it cannot
    read right, nor stop half way for it)."""
    parsed = parse_database_url(url)
    if parsed.kind == "memory":
        raise ConfigError("memory:// keeps nothing between runs; name the database to erase from")
    if parsed.kind == "sqlite" and not parsed.sqlite_path.is_file():
        raise NotFoundError(f"there is no database at {display_url(url)}; check --db or REMEM_DATABASE_URL")
    with open_store(url) as store:
        if erasing:
            store.run_statements(lambda backend: forget_usage(backend))  # forgets nothing: the check only
        store.run_statements(_journal.setup)
        yield store


def erase(
    url: str,
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    namespace: str | Sequence[str] | None = None,
    wait: float = 30.0,
    tenant: str | None = None,
) -> ErasureReport:
    """Erase a user's, a thread's or a namespace's data from the database at ``url``, checkpoints included,
    then compact; an erasure of the same scope that a crash or a failure left open is finished instead.

    ``tenant``: the scope as that tenant owns it (``remem serve`` with keys): the same rules in the tenant's
    slot of :mod:`remem.layout`, its checkpoint threads and ledger ids as :func:`remem.layout.tenant_id`
    names them. The templates of :func:`register_user_data` are the untenanted app's and are not used.

    ``wait`` bounds, in seconds, how long compaction waits for other connections that still read the old
    rows. Raises :class:`~remem.errors.ErasureIncompleteError` (with ``.report``) when it could not finish.
    """
    scope = _scope(user_id, thread_id, namespace, tenant)
    wait = _check_wait(wait)
    with _open(url, erasing=True) as store:
        digest = _digest(scope)
        entries = store.run_statements(_journal.open_entries)
        entry = next((e for e in entries if e.scope_digest == digest), None)
        if entry is None:
            entry = _journal.JournalEntry(
                uuid.uuid4().hex[:12], now_iso(), "open", digest, plan(store, url, scope)
            )
        return _run(store, url, entry, wait)


def finish_erasures(url: str, *, wait: float = 30.0) -> list[ErasureReport]:
    """Finish every erasure left open in the database at ``url``, oldest first; their reports (none: [])."""
    wait = _check_wait(wait)
    with _open(url, erasing=True) as store:
        entries = store.run_statements(_journal.open_entries)
        return [_run(store, url, entry, wait) for entry in entries]


def unfinished_erasures(url: str) -> int:
    """How many erasures are open (recorded, not yet finished) in the database at ``url``."""
    with _open(url) as store:
        return len(store.run_statements(_journal.open_entries))


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
        sample = fill(".".join(fill(template, "{user_id}", "u")), "{thread_id}", "t")
        store_scope(namespace=tuple(sample))
    for template in threads:
        if "{user_id}" not in template:
            raise ConfigError(f"thread pattern {template!r} needs {{user_id}}, e.g. 'support-{{user_id}}-*'")
    with _open(url) as store:
        store.run_statements(lambda backend: _journal.add_templates(backend, "namespace", namespaces))
        store.run_statements(lambda backend: _journal.add_templates(backend, "thread", threads))


def registered_user_data(url: str) -> dict[str, list[str]]:
    """The templates :func:`register_user_data` recorded: ``{"namespaces": [...], "threads": [...]}``."""
    with _open(url) as store:
        rows = store.run_statements(_journal.templates)
    return {
        "namespaces": [t for k, t in rows if k == "namespace"],
        "threads": [t for k, t in rows if k == "thread"],
    }
