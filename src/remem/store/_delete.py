"""Programs that delete: a generic delete (namespace prefixes, keys, value matches), TTL sweeps, statistics.

The store knows no higher layer's data: what a delete covers (a user's, a thread's) is decided above it
(:mod:`remem.erasure`), which hands the store prefixes, keys and value matches. See :mod:`remem.store._program`
for how programs run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from remem.store import _core as core
from remem.store._exec import Program, Statement, Tx
from remem.store._rows import _CHUNK, Dialect, _rows_by_key
from remem.store._schema import ITEMS, NS, VECTORS
from remem.store._write import delete_ids

__all__ = ["DeleteReport", "Statement", "Statements", "delete_program"]

T = TypeVar("T")
Found = dict[int, tuple[tuple[str, ...], str, str]]

Statements = Program[T]
"""A higher layer's statements run in a store transaction (SQL in the backend's own placeholder style): a
program of :mod:`remem._statements`, as every remem package writes them."""


@dataclass
class DeleteReport:
    """What :meth:`~remem.store.RememStoreBase.delete_items` removed: rows deleted, and each item's key."""

    items: int = 0
    vectors: int = 0
    keyword_rows: int = 0
    namespaces: int = 0
    """Namespaces left empty by the delete, and removed."""
    item_keys: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    """(namespace, key) of every item deleted, sorted."""
    compacted: bool = False


def _select(d: Dialect, where: str, params: list[Any]) -> Program[Found]:
    rows = yield Statement(
        d.q(
            f"SELECT i.id, n.path, i.key, i.value FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id WHERE {where}"
        ),
        params,
    )
    return {int(r[0]): (core.ns_tuple(r[1]), r[2], r[3]) for r in rows}


def check_delete(
    prefixes: Sequence[tuple[str, ...]],
    keys: Sequence[tuple[tuple[str, ...], str]],
    matching: Sequence[tuple[tuple[str, ...], Mapping[str, str]]],
) -> None:
    """Refuse labels, keys and match keys the store would refuse, before any SQL is built."""
    for prefix in prefixes:
        core.validate_namespace(tuple(prefix))
    for namespace, key in keys:
        core.validate_namespace(tuple(namespace))
        core.validate_key(key)
    for prefix, values in matching:
        core.validate_namespace(tuple(prefix), allow_empty=True)
        core.validate_filter(dict(values))


def delete_program(
    d: Dialect,
    tx: Tx,
    prefixes: Sequence[tuple[str, ...]],
    keys: Sequence[tuple[tuple[str, ...], str]],
    matching: Sequence[tuple[tuple[str, ...], Mapping[str, str]]],
) -> Program[tuple[DeleteReport, list[str]]]:
    """Delete every item under ``prefixes``, the items ``keys`` name, and every item under a prefix of
    ``matching`` whose value holds each (key, text) given; with their vectors and keyword rows, and the
    namespaces left empty. Returns the report and the deleted values (whose cached embeddings go too)."""
    ids: Found = {}
    for prefix in prefixes:
        where, params = d.ns_condition(tuple(prefix))
        ids.update((yield from _select(d, where, params)))
    if keys:
        cols = "i.id, n.path, i.key, i.value"
        rows = yield from _rows_by_key(d, [(core.ns_path(tuple(ns)), key) for ns, key in keys], None, cols)
        ids.update({int(r[0]): (core.ns_tuple(r[1]), r[2], r[3]) for r in rows.values()})
    for prefix, values in matching:
        where, params = d.ns_condition(tuple(prefix))
        for key, value in values.items():
            cond, extra = d.filter_condition(key, "str", value)
            where, params = f"{where} AND {cond}", params + extra
        ids.update((yield from _select(d, where, params)))
    report = DeleteReport()
    report.item_keys = sorted((ns, key) for ns, key, _ in ids.values())
    report.items, report.vectors, report.keyword_rows = yield from delete_ids(d, tx, sorted(ids))
    paths = sorted({core.ns_path(ns) for ns, _, _ in ids.values()})
    for start in range(0, len(paths), _CHUNK):
        chunk = paths[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        deleted = yield Statement(
            d.q(
                f"DELETE FROM {NS} WHERE path IN ({marks}) AND NOT EXISTS "
                f"(SELECT 1 FROM {ITEMS} i WHERE i.ns_id = {NS}.id)"
            ),
            chunk,
            "count",
        )
        report.namespaces += int(deleted[0][0])
    return report, [v for _, _, v in ids.values()]


def sweep_program(d: Dialect, tx: Tx, now: float) -> Program[int]:
    rows = yield Statement(
        d.q(f"SELECT id FROM {ITEMS} WHERE expires_at IS NOT NULL AND expires_at <= ?"), [now]
    )
    counts = yield from delete_ids(d, tx, [int(r[0]) for r in rows])
    return counts[0]


def stats_program(d: Dialect) -> Program[dict[str, Any]]:
    out: dict[str, Any] = {}
    for name, sql in (
        ("items", f"SELECT count(*) FROM {ITEMS}"),
        ("namespaces", f"SELECT count(*) FROM {NS}"),
        ("vectors", f"SELECT count(*) FROM {VECTORS}"),
        ("expiring items", f"SELECT count(*) FROM {ITEMS} WHERE expires_at IS NOT NULL"),
    ):
        out[name] = int((yield Statement(d.q(sql), []))[0][0])
    rows = yield Statement(
        d.q(f"SELECT n.path, count(i.id) FROM {NS} n JOIN {ITEMS} i ON i.ns_id = n.id GROUP BY n.path"),
        [],
    )
    top: dict[str, int] = {}
    for path, count in rows:
        head = path.split(core.SEP, 1)[0]
        top[head] = top.get(head, 0) + int(count)
    out["by_root"] = dict(sorted(top.items(), key=lambda kv: -kv[1]))
    return out
