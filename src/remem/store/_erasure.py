"""Programs for erasure, TTL sweeps and statistics (see :mod:`remem.store._program` for how they run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remem.store import _core as core
from remem.store._program import _CHUNK, Dialect, Program, Sql, delete_ids


@dataclass
class ForgetReport:
    """What an erasure removed. ``scopes`` says what was asked; counts are rows deleted."""

    scopes: list[str]
    items: int = 0
    vectors: int = 0
    keyword_rows: int = 0
    namespaces: int = 0
    queued: int = 0
    compacted: bool = False
    item_keys: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("scopes", ", ".join(self.scopes)),
            ("items", str(self.items)),
            ("vectors", str(self.vectors)),
            ("keyword index rows", str(self.keyword_rows)),
            ("namespaces", str(self.namespaces)),
            ("queued extraction work", str(self.queued)),
            ("storage compacted", "yes" if self.compacted else "no"),
        ]


def _select(d: Dialect, where: str, params: list[Any]) -> Program:
    rows = yield Sql(
        d.q(
            f"SELECT i.id, n.path, i.key, i.value FROM remem_items i JOIN remem_ns n ON n.id = i.ns_id WHERE {where}"
        ),
        params,
    )
    return {int(r[0]): (core.ns_tuple(r[1]), r[2], r[3]) for r in rows}


def forget_program(
    d: Dialect,
    prefixes: list[tuple[str, ...]],
    value_matches: list[tuple[tuple[str, ...], str, str]],
    scopes: list[str],
    owner: tuple[str, str] | None = None,
) -> Program:
    """Delete every item under ``prefixes`` and every item under a prefix whose value[key] == value.

    With ``owner`` = (key, value), a thread ``("threads", T)`` in which a matched item sits is deleted whole
    when every item of it that names an owner names this one (a thread shared with another user is not).
    """
    ids: dict[int, tuple[tuple[str, ...], str, str]] = {}
    for prefix in prefixes:
        core.validate_namespace(prefix)
        where, params = d.ns_condition(prefix)
        ids.update((yield from _select(d, where, params)))
    for prefix, key, value in value_matches:
        core.validate_namespace(prefix, allow_empty=True)
        where, params = d.ns_condition(prefix)
        cond, extra = d.filter_condition(key, "str", value)
        ids.update((yield from _select(d, f"{where} AND {cond}", params + extra)))
    if owner is not None:
        threads = sorted({ns[:2] for ns, _, _ in ids.values() if len(ns) >= 2 and ns[0] == "threads"})
        for thread in threads:
            where, params = d.ns_condition(thread)
            found = yield from _select(d, where, params)
            owners = {core.loads(v).get(owner[0]) for _, _, v in found.values()} - {None}
            if owners == {owner[1]}:
                ids.update(found)
    report = ForgetReport(scopes=scopes)
    report.item_keys = sorted((ns, key) for ns, key, _ in ids.values())
    report.queued = sum(1 for ns, _, _ in ids.values() if ns[:2] == ("_remem", "extraction"))
    report.items, report.vectors, report.keyword_rows = yield from delete_ids(d, sorted(ids))
    paths = sorted({core.ns_path(ns) for ns, _, _ in ids.values()})
    for start in range(0, len(paths), _CHUNK):
        chunk = paths[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        report.namespaces += yield Sql(
            d.q(
                f"DELETE FROM remem_ns WHERE path IN ({marks}) AND NOT EXISTS "
                "(SELECT 1 FROM remem_items i WHERE i.ns_id = remem_ns.id)"
            ),
            chunk,
            fetch=False,
        )
    return report, [v for _, _, v in ids.values()]


def sweep_program(d: Dialect, now: float) -> Program:
    rows = yield Sql(
        d.q("SELECT id FROM remem_items WHERE expires_at IS NOT NULL AND expires_at <= ?"), [now]
    )
    counts = yield from delete_ids(d, [int(r[0]) for r in rows])
    return counts[0]


def stats_program(d: Dialect) -> Program:
    out: dict[str, Any] = {}
    for name, sql in (
        ("items", "SELECT count(*) FROM remem_items"),
        ("namespaces", "SELECT count(*) FROM remem_ns"),
        ("vectors", "SELECT count(*) FROM remem_vectors"),
        ("expiring items", "SELECT count(*) FROM remem_items WHERE expires_at IS NOT NULL"),
    ):
        out[name] = int((yield Sql(d.q(sql), []))[0][0])
    rows = yield Sql(
        d.q(
            "SELECT n.path, count(i.id) FROM remem_ns n JOIN remem_items i ON i.ns_id = n.id GROUP BY n.path"
        ),
        [],
    )
    top: dict[str, int] = {}
    for path, count in rows:
        head = path.split(core.SEP, 1)[0]
        top[head] = top.get(head, 0) + int(count)
    out["by_root"] = dict(sorted(top.items(), key=lambda kv: -kv[1]))
    return out
