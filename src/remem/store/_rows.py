"""What every store program shares: the SQL that differs between SQLite and PostgreSQL (:class:`Dialect`),
the item rows they read, and the checks an op passes before any SQL runs. See :mod:`remem.store._program`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    SearchOp,
    validate_op_namespace,
)

from remem.store import _core as core
from remem.store import _keyword as kw
from remem.store._exec import Program, Statement, Tx, Vector
from remem.store._schema import ITEMS, NS

_ITEM_COLS = "i.id, n.path, i.key, i.value, i.created_at, i.updated_at, i.ttl_minutes"
_LIVE = "(i.expires_at IS NULL OR i.expires_at > ?)"
_CHUNK = core.CHUNK


class Dialect:
    """SQL that differs between SQLite and Postgres (programs only call these methods), and the keyword
    statistics one store reuses between searches."""

    name = "base"

    def __init__(self, keyword_budget: int = 2000) -> None:
        self.keywords = kw.KeywordCache()
        self.keyword_budget = keyword_budget

    def q(self, sql: str) -> str:
        return sql

    def ns_condition(self, prefix: Sequence[str], col: str = "n.path") -> tuple[str, list[Any]]:
        bounds = core.prefix_bounds(prefix)
        if bounds is None:
            return "1=1", []
        exact, low, high = bounds
        return f"({col} = ? OR ({col} > ? AND {col} < ?))", [exact, low, high]

    def ids_condition(self, col: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def filter_condition(self, key: str, kind: str, value: Any) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def upsert_parts(self) -> tuple[str, list[str], str]:
        """(columns, one value expression per column, ON CONFLICT clause) of the item upsert; ns_id first."""
        raise NotImplementedError

    def vectors_written(self, ns_ids: Sequence[int], dims: int) -> Program[None]:
        """What follows a write that added vectors to these namespaces, in its transaction (SQLite packs
        them into blocks, :mod:`remem.store._blocks`; PostgreSQL has nothing to do)."""
        return None
        yield  # a generator that asks for nothing

    def upsert(self) -> str:
        columns, values, conflict = self.upsert_parts()
        return f"INSERT INTO {ITEMS} ({columns}) VALUES ({', '.join(values)}) {conflict}"

    def upsert_in_namespace(self) -> str:
        """The upsert with the namespace id looked up by path (the last parameter) in the same statement;
        it writes nothing when the namespace does not exist yet."""
        columns, values, conflict = self.upsert_parts()
        return (
            f"INSERT INTO {ITEMS} ({columns}) SELECT n.id, {', '.join(values[1:])} FROM {NS} n "
            f"WHERE n.path = ? {conflict}"
        )

    def upsert_params(
        self, ns_id: int, key: str, value: dict[str, Any], text: str, now: float, ttl: float | None
    ) -> list[Any]:
        raise NotImplementedError

    def keyword_replace(self, items: Sequence[tuple[int, dict[str, int]]]) -> Statement | None:
        """One statement that replaces the keyword rows of (item id, {word: count}) where they
        changed and returns one row with how many items it rewrote; None: ``_keyword.write_ops`` reads the
        old words, compares them and writes."""
        return None

    def keyword_relevance(self, raw: float) -> float:
        """A keyword score mapped into [0, 1], higher is better (bm25 is unbounded: s / (1 + s))."""
        return max(raw, 0.0) / (1.0 + max(raw, 0.0))

    def vector_param(self, vec: Vector) -> Any:
        return np.asarray(vec, dtype=np.float32).tobytes()


def validate_op(op: Op) -> None:
    if isinstance(op, GetOp | PutOp):
        core.validate_namespace(op.namespace)
    elif isinstance(op, SearchOp):
        core.validate_namespace(tuple(op.namespace_prefix), allow_empty=True)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            core.validate_namespace(tuple(condition.path), allow_empty=True)
    validate_op_namespace(op)  # and LangGraph's own checks


def validate_ops(ops: Iterable[Op]) -> None:
    """:func:`validate_op` for each op, a get's or put's namespace checked once a batch (their checks read
    the namespace alone, and a page of gets shares one)."""
    checked: set[tuple[str, ...]] = set()
    for op in ops:
        if not isinstance(op, GetOp | PutOp):
            validate_op(op)
            continue
        try:
            if op.namespace in checked:
                continue
        except TypeError:  # unhashable, so not a tuple of strings: validate_op says what is wrong
            pass
        validate_op(op)
        checked.add(op.namespace)


def _item(row: Sequence[Any], score: float | None = None) -> Item:
    _, path, key, value, created, updated = row[:6]
    return Item(
        value=core.loads(value),
        key=key,
        namespace=core.ns_tuple(path),
        created_at=core.to_datetime(created),
        updated_at=core.to_datetime(updated),
    )


def _touch(tx: Tx, rows: Iterable[Sequence[Any]]) -> None:
    """Ask for the expiry of these item rows (those with a TTL) to be refreshed after the read."""
    tx.touched.extend(int(r[0]) for r in rows if r[6] is not None)


def _rows_by_key(
    d: Dialect, keys: Sequence[tuple[str, str]], now: float | None, cols: str = _ITEM_COLS
) -> Program[dict[tuple[str, str], tuple[Any, ...]]]:
    """Item rows by (namespace path, key), a few hundred pairs per statement (``now``: live ones only)."""
    out: dict[tuple[str, str], tuple[Any, ...]] = {}
    pairs = sorted(set(keys))
    step = _CHUNK // 2
    for start in range(0, len(pairs), step):
        chunk = pairs[start : start + step]
        values = ", ".join("(?, ?)" for _ in chunk)
        live = f" WHERE {_LIVE}" if now is not None else ""
        # the pairs as a table joined to the unique indexes (a row-value IN would scan every item on SQLite)
        rows = yield Statement(
            d.q(
                f"SELECT n.path, i.key, {cols} FROM (VALUES {values}) w JOIN {NS} n ON n.path = w.column1 "
                f"JOIN {ITEMS} i ON i.ns_id = n.id AND i.key = w.column2{live}"
            ),
            [x for pair in chunk for x in pair] + ([now] if now is not None else []),
        )
        out.update({(str(r[0]), str(r[1])): r[2:] for r in rows})
    return out


def _rows_by_id(d: Dialect, ids: list[int], now: float) -> Program[dict[int, tuple[Any, ...]]]:
    out: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(ids), _CHUNK):
        cond, params = d.ids_condition("i.id", ids[start : start + _CHUNK])
        rows = yield Statement(
            d.q(f"SELECT {_ITEM_COLS} FROM {ITEMS} i JOIN {NS} n ON n.id = i.ns_id WHERE {cond} AND {_LIVE}"),
            [*params, now],
        )
        out.update({int(r[0]): r for r in rows})
    return out


def core_hash(text: str) -> bytes:
    from remem.embeddings import text_hash

    return text_hash(text)
