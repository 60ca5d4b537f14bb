"""The stores' logic, written once as programs: generators of SQL statements (see :mod:`remem.store._exec`).

A sync driver runs a program with a sqlite3 or psycopg connection, an async driver with an async one; the
programs never touch a connection. SQL is written with ``?`` placeholders; a dialect rewrites them.
"""

import math
import time
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from remem.errors import RememUsageError
from remem.store import _core as core
from remem.store._core import IndexPlan, SearchMode
from remem.store._exec import Program, Statement, Tx
from remem.store._rows import _CHUNK, _ITEM_COLS, _LIVE, Dialect, _item, _rows_by_key, _touch, validate_ops
from remem.store._schema import ITEMS, NS
from remem.store._search import search_program
from remem.store._write import check_put, put_program

# ---------------------------------------------------------------- batch


def batch_program(
    d: Dialect,
    tx: Tx,
    plan: IndexPlan | None,
    ops: Iterable[Op],
    mode: SearchMode,
    now: float | None = None,
    *,
    omit_expired: bool = False,
) -> Program[list[Result]]:
    """All ops of a batch: reads in order against the state before the batch, then the puts (last one wins).
    ``tx.ready``: vectors embedded ahead (see :func:`texts_to_embed_program`); ``now``: the store's clock
    (default: the system's). ``omit_expired`` (``TTLConfig["omit_expired"]``): reads leave out items past
    their expiry that no sweep has deleted yet; without it they see them until a sweep, as LangGraph's."""
    ops = list(ops)
    results: list[Result] = [None] * len(ops)
    puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
    now = time.time() if now is None else now
    seen = now if omit_expired else -math.inf  # reads see the items that expire after this
    validate_ops(ops)
    answered: dict[
        Any, Result
    ] = {}  # every read sees the state before the puts: an identical read, one answer
    gets = [op for op in ops if isinstance(op, GetOp)]
    for get in gets:
        core.validate_key(get.key)
    found: dict[tuple[str, str], tuple[Any, ...]] | None = None
    if len(gets) > 1:  # every get of the batch in a few statements instead of one each
        found = yield from _rows_by_key(d, [(core.ns_path(get.namespace), get.key) for get in gets], seen)
    # (an identical read is found by the op itself, a get (hashable), or a search's repr (its filter is a
    # dict), worth its cost only where a batch has more than one read)
    reads = sum(1 for op in ops if not isinstance(op, PutOp))
    for i, op in enumerate(ops):
        same: Any = None
        if not isinstance(op, PutOp) and reads > 1:
            same = op if isinstance(op, GetOp) else repr(op)
        if same is not None and same in answered:
            results[i] = answered[same]
            continue
        if isinstance(op, GetOp) and found is not None:
            row = found.get((core.ns_path(op.namespace), op.key))
            if row is not None and op.refresh_ttl:
                _touch(tx, [row])
            results[i] = None if row is None else _item(row)
        elif isinstance(op, GetOp):
            results[i] = yield from get_program(d, tx, op, seen)
        elif isinstance(op, SearchOp):
            results[i] = list[SearchItem]((yield from search_program(d, tx, plan, op, mode, seen)))
        elif isinstance(op, ListNamespacesOp):
            results[i] = yield from list_namespaces_program(d, op, seen)
        elif isinstance(op, PutOp):
            check_put(op)
            puts[(op.namespace, op.key)] = op
        else:
            raise RememUsageError(
                f"unknown store operation {type(op).__name__}; use GetOp, PutOp, SearchOp, ListNamespacesOp"
            )
        if same is not None:
            answered[same] = results[i]
    if puts and not tx.unembedded:  # (a read missed its vector: no write before the batch runs again)
        yield from put_program(d, tx, plan, list(puts.values()), now)
    return results


def refresh_program(d: Dialect, ids: list[int], now: float) -> Program[None]:
    """Push back the expiry of items read with ``refresh_ttl`` (a write; see :attr:`Tx.touched`)."""
    for start in range(0, len(ids), _CHUNK):
        cond, params = d.ids_condition("id", ids[start : start + _CHUNK])
        yield Statement(
            d.q(
                f"UPDATE {ITEMS} SET expires_at = ? + ttl_minutes * 60 WHERE ttl_minutes IS NOT NULL AND {cond}"
            ),
            [now, *params],
            "none",
        )


def get_program(d: Dialect, tx: Tx, op: GetOp, now: float) -> Program[Item | None]:
    rows = yield Statement(
        d.q(
            f"SELECT {_ITEM_COLS} FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id "
            f"WHERE n.path = ? AND i.key = ? AND {_LIVE}"
        ),
        [core.ns_path(op.namespace), op.key, now],
    )
    if not rows:
        return None
    if op.refresh_ttl:
        _touch(tx, rows[:1])
    return _item(rows[0])


def list_namespaces_program(d: Dialect, op: ListNamespacesOp, now: float) -> Program[list[tuple[str, ...]]]:
    where, params = "1=1", list[Any]()
    for cond in op.match_conditions or ():
        if cond.match_type not in ("prefix", "suffix"):
            raise RememUsageError(f"unknown match type {cond.match_type!r}; use 'prefix' or 'suffix'")
        if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
            where, params = d.ns_condition(tuple(cond.path))
    rows = yield Statement(
        d.q(
            f"SELECT n.path FROM {NS} n WHERE {where} AND EXISTS "
            f"(SELECT 1 FROM {ITEMS} i WHERE i.ns_id = n.id AND {_LIVE})"
        ),
        [*params, now],
    )
    namespaces = [core.ns_tuple(r[0]) for r in rows]
    for cond in op.match_conditions or ():
        namespaces = [ns for ns in namespaces if _matches(cond.match_type, tuple(cond.path), ns)]
    if op.max_depth is not None:
        namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
    else:
        namespaces = sorted(namespaces)
    return namespaces[op.offset : op.offset + op.limit]


def _matches(kind: str, path: tuple[str, ...], ns: tuple[str, ...]) -> bool:
    if len(ns) < len(path):
        return False
    pairs = (
        zip(ns, path, strict=False) if kind == "prefix" else zip(reversed(ns), reversed(path), strict=False)
    )
    return all(p == "*" or a == p for a, p in pairs)
