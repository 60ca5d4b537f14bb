"""API keys of ``remem serve``: one tenant each (or admin), stored hashed in the database, shown once.

    secret, key = create_key(store, tenant="acme")     # give `secret` to the app; it is not kept
    verify_key(store, secret)                           # -> the KeyInfo, or None (unknown, revoked, expired)
    new_secret, new = rotate_key(store, key.key_id, grace=3600)   # the old key works one more hour

A key is ``rmk_`` and 43 random URL-safe characters (256 bits). The database keeps only its SHA-256 (a
slow hash buys nothing against a random 256-bit secret), as the item key of one record in remem's own
bookkeeping namespace (``("_remem", "api_keys")``, under :data:`remem.layout.INTERNAL_ROOT`), with the
key's tenant, role, name and times; ``key_id`` (the first 12 hex digits of the hash) names a key in lists
and commands. Revoked keys stay listed (marked), so a server that had keys never opens up again.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.store.base import BaseStore

from remem import layout
from remem._clock import now_iso
from remem.errors import NotFoundError, RememUsageError
from remem.server._tenancy import check_tenant

__all__ = [
    "KEYS_NAMESPACE",
    "KeyCache",
    "KeyInfo",
    "create_key",
    "has_keys",
    "list_keys",
    "revoke_key",
    "rotate_key",
    "verify_key",
]

KEYS_NAMESPACE = layout.namespace(layout.INTERNAL_ROOT, "api_keys")
_PREFIX = "rmk_"
_MAX_KEYS = 100_000  # listed in one read; far above what one database serves
Role = Literal["tenant", "admin"]


@dataclass(frozen=True)
class KeyInfo:
    """What is stored about a key (never the key): its id, tenant (None for admin), role and times."""

    key_id: str
    tenant: str | None
    role: Role
    name: str
    created_at: str
    revoked_at: str | None = None
    expires_at: float | None = None  # a rotated key's end of grace (epoch seconds)

    def active(self, now: float | None = None) -> bool:
        when = time.time() if now is None else now
        return self.revoked_at is None and (self.expires_at is None or when < self.expires_at)

    def as_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "tenant": self.tenant,
            "role": self.role,
            "name": self.name,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "expires_at": self.expires_at,
            "active": self.active(),
        }

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> KeyInfo:
        return cls(
            key_id=str(value["key_id"]),
            tenant=value.get("tenant"),
            role="admin" if value.get("role") == "admin" else "tenant",
            name=str(value.get("name", "")),
            created_at=str(value.get("created_at", "")),
            revoked_at=value.get("revoked_at"),
            expires_at=value.get("expires_at"),
        )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _records(store: BaseStore) -> list[tuple[str, KeyInfo]]:
    items = store.search(KEYS_NAMESPACE, limit=_MAX_KEYS)
    return [(item.key, KeyInfo.from_value(item.value)) for item in items]


def _save(store: BaseStore, digest: str, info: KeyInfo) -> None:
    value = {k: v for k, v in info.as_dict().items() if k != "active"}
    store.put(KEYS_NAMESPACE, digest, value, index=False)


def create_key(
    store: BaseStore, *, tenant: str | None = None, admin: bool = False, name: str = ""
) -> tuple[str, KeyInfo]:
    """A new key: ``(secret, info)``. A tenant key needs ``tenant``; an admin key (key management) has none."""
    if admin and tenant is not None:
        raise RememUsageError("an admin key manages keys and has no tenant; leave out --tenant")
    if not admin and tenant is None:
        raise RememUsageError("say whose key it is: --tenant NAME (or --admin for a key-management key)")
    if tenant is not None:
        check_tenant(tenant)
    if not isinstance(name, str) or len(name) > 200:
        raise RememUsageError("a key's name is a text of at most 200 characters")
    secret = _PREFIX + secrets.token_urlsafe(32)
    digest = _digest(secret)
    info = KeyInfo(
        key_id=digest[:12],
        tenant=tenant,
        role="admin" if admin else "tenant",
        name=name,
        created_at=now_iso(),
    )
    _save(store, digest, info)
    return secret, info


def verify_key(store: BaseStore, secret: str) -> KeyInfo | None:
    """The active key ``secret`` is, or None (unknown, revoked, past its grace)."""
    if not isinstance(secret, str) or not secret.startswith(_PREFIX) or len(secret) > 200:
        return None
    digest = _digest(secret)
    item = store.get(KEYS_NAMESPACE, digest)
    if item is None or not hmac.compare_digest(item.key, digest):
        return None
    info = KeyInfo.from_value(item.value)
    return info if info.active() else None


class KeyCache:
    """What a server process knows of the keys, read from the store at most once every ``ttl`` seconds
    per key: :meth:`lookup` answers from memory (no I/O, so on the event loop), :meth:`verify` and
    :meth:`has_keys` read the store when memory does not know. Only a key found active is kept (an unknown
    key is read again each time, so a key just created works at once), and a kept key is checked
    :meth:`KeyInfo.active` on each use, so a rotated key's grace ends on time. A revoke or rotation through
    this process :meth:`clear` s it at once; one made elsewhere (another worker, ``remem keys`` on the
    command line) reaches this process within ``ttl`` seconds. That "there are keys" is kept for good once
    true: keys are never deleted (revoked ones stay listed)."""

    def __init__(self, store: BaseStore, ttl: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.store, self.ttl, self.clock = store, ttl, clock
        self._known: dict[str, tuple[float, KeyInfo]] = {}
        self._keyed: tuple[float, bool] | None = None
        self._lock = threading.Lock()
        self._generation = 0  # bumped by clear(): a read begun before it must not be kept after it

    def lookup(self, secret: str) -> KeyInfo | None:
        """The active key ``secret`` is if this process read it less than ``ttl`` ago, else None."""
        with self._lock:
            kept = self._known.get(_digest(secret))
        if kept is None or self.clock() - kept[0] >= self.ttl:
            return None
        return kept[1] if kept[1].active() else None

    def verify(self, secret: str) -> KeyInfo | None:
        """:func:`verify_key`, from memory when fresh."""
        found = self.lookup(secret)
        if found is not None:
            return found
        with self._lock:
            generation = self._generation
        found = verify_key(self.store, secret)
        digest = _digest(secret)
        with self._lock:
            if found is None:
                self._known.pop(digest, None)
                return None
            if generation != self._generation:  # revoked or rotated while it was read: answer, keep nothing
                return found
            if len(self._known) >= 10_000:  # a bound: drop the oldest half
                for old, _ in sorted(self._known.items(), key=lambda kv: kv[1][0])[:5_000]:
                    del self._known[old]
            self._known[digest] = (self.clock(), found)
        return found

    def keyed(self) -> bool | None:
        """:meth:`has_keys` from memory: None when it must be read."""
        with self._lock:
            known = self._keyed
        if known is None or not (known[1] or self.clock() - known[0] < self.ttl):
            return None
        return known[1]

    def has_keys(self) -> bool:
        """:func:`has_keys`, from memory when known."""
        known = self.keyed()
        if known is not None:
            return known
        found = has_keys(self.store)
        with self._lock:
            self._keyed = (self.clock(), found)
        return found

    def clear(self) -> None:
        """Forget every key read (after a revoke or rotation through this process)."""
        with self._lock:
            self._known.clear()
            self._generation += 1


def has_keys(store: BaseStore) -> bool:
    """Whether any key was ever created in this database (revoked ones count)."""
    return bool(store.search(KEYS_NAMESPACE, limit=1))


def list_keys(store: BaseStore, *, tenant: str | None = None) -> list[KeyInfo]:
    """Every key (of ``tenant`` when given), oldest first."""
    found = [info for _, info in _records(store) if tenant is None or info.tenant == tenant]
    return sorted(found, key=lambda k: (k.created_at, k.key_id))


def _find(store: BaseStore, key_id: str) -> tuple[str, KeyInfo]:
    if not isinstance(key_id, str) or not key_id:
        raise RememUsageError("give the key's id as `remem keys list` shows it (12 hex digits)")
    for digest, info in _records(store):
        if info.key_id == key_id:
            return digest, info
    raise NotFoundError(f"there is no key {key_id!r}; `remem keys list` shows the keys")


def revoke_key(store: BaseStore, key_id: str) -> KeyInfo:
    """Revoke a key at once (it stays listed, marked revoked)."""
    digest, info = _find(store, key_id)
    if info.revoked_at is None:
        info = KeyInfo(**{**info.__dict__, "revoked_at": now_iso()})
        _save(store, digest, info)
    return info


def rotate_key(store: BaseStore, key_id: str, *, grace: float = 3600.0) -> tuple[str, KeyInfo]:
    """A new key for the same tenant and role; the old one keeps working ``grace`` seconds more."""
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 366 * 86400:
        raise RememUsageError(f"grace is a number of seconds from 0 to a year, such as 3600; got {grace!r}")
    digest, old = _find(store, key_id)
    if not old.active():
        raise RememUsageError(
            f"key {key_id} is revoked or expired; create a new one with `remem keys create`"
        )
    secret, new = create_key(store, tenant=old.tenant, admin=old.role == "admin", name=old.name)
    ends = time.time() + float(grace)
    if old.expires_at is None or ends < old.expires_at:
        _save(store, digest, KeyInfo(**{**old.__dict__, "expires_at": ends}))
    return secret, new
