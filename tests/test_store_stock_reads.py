"""Reads as LangGraph's stores read, on every store cell of the backend matrix (sync and async, SQLite and
PostgreSQL): an item put with ``index=False`` is not searchable by a query, expired items are seen until a
sweep unless ``TTLConfig["omit_expired"]`` says otherwise, and a listing without a query comes newest first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import matrix

STORE_CELLS = [p for p in matrix.cells() if p.values[0][0] == "store"]


@pytest.fixture(params=STORE_CELLS)
def cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[matrix.Cell]:
    with matrix.open_cell(request.param, request, tmp_path) as opened:
        yield opened


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _keys(items: list[Any]) -> list[str]:
    return [item.key for item in items]


def test_an_item_put_with_index_false_is_not_found_by_a_query(cell: matrix.Cell) -> None:
    store = cell.obj
    cell.call(store, "put", ("docs",), "plain", {"text": "green tea by the river"}, index=False)
    cell.call(store, "put", ("docs",), "tea", {"text": "a cup of green tea"})
    cell.call(store, "put", ("docs",), "coffee", {"text": "black coffee"})
    found = cell.call(store, "search", ("docs",), query="green tea by the river", limit=10)
    assert "plain" not in _keys(found) and _keys(found)[0] == "tea"
    assert cell.call(store, "get", ("docs",), "plain").value["text"] == "green tea by the river"
    assert "plain" in _keys(cell.call(store, "search", ("docs",)))  # listed, as every item is
    # indexed once, then put again with index=False: its words go too
    cell.call(store, "put", ("docs",), "tea", {"text": "a cup of green tea"}, index=False)
    assert "tea" not in _keys(cell.call(store, "search", ("docs",), query="green tea", limit=10))


def test_expired_items_are_seen_until_a_sweep_unless_omit_expired(cell: matrix.Cell) -> None:
    store = cell.obj
    clock = Clock()
    store.clock = clock
    cell.call(store, "put", ("t",), "short", {"text": "brief"}, ttl=1)
    cell.call(store, "put", ("t",), "kept", {"text": "lasting"})
    clock.now += 61  # "short" expired, not swept
    assert cell.call(store, "get", ("t",), "short", refresh_ttl=False) is not None  # as LangGraph's stores
    assert set(_keys(cell.call(store, "search", ("t",), refresh_ttl=False))) == {"short", "kept"}
    assert cell.call(store, "list_namespaces") == [("t",)]
    store.ttl_config = {"omit_expired": True}
    assert cell.call(store, "get", ("t",), "short") is None
    assert _keys(cell.call(store, "search", ("t",))) == ["kept"]
    assert "short" not in _keys(cell.call(store, "search", ("t",), query="brief"))
    store.ttl_config = None
    assert cell.call(store, "sweep_ttl") == 1
    assert cell.call(store, "get", ("t",), "short") is None


def test_a_listing_without_a_query_comes_newest_first_as_langgraphs_sql_stores(cell: matrix.Cell) -> None:
    store = cell.obj
    clock = Clock()
    store.clock = clock
    for key in ("b", "a", "c"):
        cell.call(store, "put", ("n", "y"), key, {"text": key})
    cell.call(store, "put", ("n", "x"), "z", {"text": "z"})  # the same instant: by namespace, then key
    clock.now += 5
    cell.call(store, "put", ("n", "y"), "c", {"text": "c, updated"})
    listed = cell.call(store, "search", ("n",), limit=10)
    assert [(i.namespace[-1], i.key) for i in listed] == [("y", "c"), ("x", "z"), ("y", "a"), ("y", "b")]
    assert _keys(cell.call(store, "search", ("n",), limit=2, offset=1)) == ["z", "a"]
    assert _keys(cell.call(store, "search", ("n",), filter={"text": "a"})) == ["a"]


def test_number_filters_match_inmemorystore_and_odd_values_get_clear_errors(cell: matrix.Cell) -> None:
    from langgraph.store.memory import InMemoryStore

    from remem.errors import RememUsageError

    store, stock = cell.obj, InMemoryStore()
    values = {"tiny": 5e-324, "point3": 0.3, "sum": 0.30000000000000004, "int": 5, "huge": 2**70, "one": 1.0}
    for key, number in values.items():
        cell.call(store, "put", ("n",), key, {"k": number})
        stock.put(("n",), key, {"k": number})
    for probe in (5e-324, 0.30000000000000004, 0.3, 5, 2**70, 1, 2**70 + 1, {"$gt": 0.3}):
        expected = sorted(i.key for i in stock.search(("n",), filter={"k": probe}))
        assert sorted(_keys(cell.call(store, "search", ("n",), filter={"k": probe}))) == expected, probe
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(1500):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(RememUsageError, match="nests too deep"):
        cell.call(store, "put", ("n",), "deep", deep)


@pytest.mark.parametrize("refresh_on_read", [None, True, False])
def test_a_read_refreshes_a_ttl_as_the_stock_store_of_its_backend(
    cell: matrix.Cell, refresh_on_read: Any
) -> None:
    """Stock ``SqliteStore`` does not refresh on a read unless ``refresh_on_read=True`` (LangGraph's
    ``test_ttl_override_default``); stock ``PostgresStore`` refreshes unless it is False."""
    store = cell.obj
    clock = Clock()
    store.clock = clock
    ttl: dict[str, Any] = {"default_ttl": 1.0}
    if refresh_on_read is not None:
        ttl["refresh_on_read"] = refresh_on_read
    store.ttl_config = ttl
    for key in ("got", "searched", "asked"):
        cell.call(store, "put", ("t",), key, {"text": key})
    clock.now += 40
    cell.call(store, "get", ("t",), "got")
    cell.call(store, "get", ("t",), "asked", refresh_ttl=True)  # a call's own word wins everywhere
    cell.call(store, "search", ("t",), filter={"text": "searched"})
    clock.now += 40  # 80 s after the puts: expired unless a read pushed the expiry back
    sqlite = cell.backend.startswith("sqlite")
    refreshes = refresh_on_read if refresh_on_read is not None else not sqlite
    assert cell.call(store, "sweep_ttl") == (0 if refreshes else 2)
