"""remem's stores where stock LangGraph code meets them: the options, lifecycle, scores and filters it uses.

Each deliberate difference from LangGraph's own stores is pinned here too, next to the reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import psycopg_pool
import pytest
from langgraph.store.memory import InMemoryStore
from psycopg.rows import dict_row

from remem.errors import StorageError
from remem.store import (
    AsyncPostgresStore,
    AsyncSqliteStore,
    PostgresStore,
    ahybrid_search,
    hybrid_search,
)
from remem.testing import FakeEmbedder
from tests.test_store import Clock

DIMS = 16
TEXTS = {
    "tea": "prefers green tea every morning",
    "cat": "has a cat named Miso",
    "job": "works as a nurse in Porto",
    "walk": "walks by the river at dawn",
}


def _fill(store: Any, ns: tuple[str, ...] = ("users", "u1")) -> None:
    for key, text in TEXTS.items():
        store.put(ns, key, {"text": text})


def _stock_similarity(embedder: FakeEmbedder, query: str, text: str, distance: str) -> float:
    q = np.asarray(embedder.embed_query(query), dtype=np.float64)
    v = np.asarray(embedder.embed_query(text), dtype=np.float64)
    if distance == "cosine":
        return float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))
    if distance == "inner_product":
        return float(q @ v)
    return float(-np.linalg.norm(q - v))


class _Unnormalised(FakeEmbedder):
    """Vectors of different lengths, so that cosine, inner product and L2 rank differently."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [
            [x * (1 + len(t) % 5) for x in v]
            for t, v in zip(texts, super().embed_documents(texts), strict=True)
        ]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_distance_type_gives_stock_scores_and_order(make_store: Any, distance: str) -> None:
    embedder = _Unnormalised(DIMS, seed=4)
    index = {"dims": DIMS, "embed": embedder, "fields": ["text"], "distance_type": distance}
    store = make_store(index=index, search_mode="vector")
    _fill(store)
    hits = store.search(("users",), query="tea by the river", limit=4)
    expected = {k: _stock_similarity(embedder, "tea by the river", t, distance) for k, t in TEXTS.items()}
    assert [h.key for h in hits] == sorted(expected, key=lambda k: -expected[k])
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.key], rel=1e-3, abs=1e-3)


def test_vector_scores_equal_inmemorystore_scores(make_store: Any) -> None:
    """A stock user's threshold (``score > 0.3``) means the same on remem: the cosine InMemoryStore reports."""
    embedder = FakeEmbedder(DIMS, seed=8)
    index = {"dims": DIMS, "embed": embedder, "fields": ["text"]}
    stock = InMemoryStore(index=index)  # type: ignore[arg-type]
    _fill(stock)
    expected = {h.key: h.score for h in stock.search(("users",), query="green tea", limit=4)}
    for mode in ("vector", "hybrid"):
        store = make_store(index=index, search_mode=mode)
        _fill(store)
        hits = store.search(("users",), query="green tea", limit=4)
        assert {h.key for h in hits} == set(expected)
        for hit in hits:
            assert hit.score == pytest.approx(expected[hit.key], abs=1e-4), (mode, hit.key)
            assert hit.mode == mode and hit.scores["vector"] == hit.score
        if mode == "hybrid":  # fused order, fused values alongside
            fused = [h.scores["fused"] for h in hits]
            assert fused == sorted(fused, reverse=True)


def test_keyword_scores_are_relevances_in_unit_interval(make_store: Any) -> None:
    store = make_store()
    _fill(store)
    hits = store.search(("users",), query="green tea river", limit=4)
    assert hits and all(h.mode == "keyword" and 0 < h.score < 1 for h in hits)  # type: ignore[operator]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # BM25 on every backend, mapped into [0, 1] as s / (1 + s)
    assert all(h.score == pytest.approx(h.scores["keyword"] / (1 + h.scores["keyword"])) for h in hits)


def test_dotted_filter_paths_reach_nested_keys(make_store: Any) -> None:
    store = make_store()
    store.put(("docs",), "nested", {"access-level": "public", "user": {"access-level": "nested", "n": 3}})
    store.put(("docs",), "flat", {"user.access-level": "literal"})
    assert [i.key for i in store.search(("docs",), filter={"access-level": "public"})] == ["nested"]
    assert [i.key for i in store.search(("docs",), filter={"user.access-level": "nested"})] == ["nested"]
    assert [i.key for i in store.search(("docs",), filter={"user.n": {"$gt": 2}})] == ["nested"]
    # a key that holds a dot itself is matched as itself first, as InMemoryStore does
    assert [i.key for i in store.search(("docs",), filter={"user.access-level": "literal"})] == ["flat"]
    assert store.search(("docs",), filter={"user.missing": "x"}) == []


def test_filter_keys_stock_refuses_are_matched_literally(make_store: Any) -> None:
    """Deliberate difference: LangGraph's SQL stores refuse filter keys they cannot quote ("Invalid filter
    key"); remem never puts a key into SQL, so any key is matched as the literal key it is."""
    store = make_store()
    hostile = "access') = 'public' OR '1'='1' OR json_extract(value, '$."
    store.put(("docs",), "private", {"access": "private"})
    store.put(("docs",), "odd", {hostile: "dummy"})
    assert [i.key for i in store.search(("docs",), filter={hostile: "dummy"})] == ["odd"]
    assert store.search(("docs",), filter={hostile: "public"}) == []


def test_hybrid_search_on_a_stock_store() -> None:
    embedder = FakeEmbedder(DIMS, seed=8)
    indexed = InMemoryStore(index={"dims": DIMS, "embed": embedder, "fields": ["text"]})  # type: ignore[arg-type]
    plain = InMemoryStore()
    for store in (indexed, plain):
        _fill(store)
    hits = hybrid_search(indexed, ("users",), "green tea", limit=2)
    stock = indexed.search(("users",), query="green tea", limit=2)
    assert [(h.key, h.score, h.mode) for h in hits] == [(h.key, h.score, "vector") for h in stock]
    listed = hybrid_search(plain, ("users",), "green tea", filter={"text": TEXTS["cat"]})
    assert [(h.key, h.score, h.mode) for h in listed] == [("cat", None, "list")]
    assert [h.key for h in asyncio.run(ahybrid_search(indexed, ("users",), "green tea", limit=2))] == [
        h.key for h in stock
    ]


def test_sync_calls_work_on_the_event_loop_thread(tmp_path: Path) -> None:
    """Deliberate difference: LangGraph's async stores refuse sync calls made on their event loop's thread
    (they would deadlock); remem's async stores run sync calls directly, so they simply work."""

    async def main() -> Any:
        async with AsyncSqliteStore.from_conn_string(tmp_path / "a.db") as store:
            store.put(("a",), "k", {"v": 1})
            return store.get(("a",), "k")

    item = asyncio.run(main())
    assert item is not None and item.value == {"v": 1}


def _count_sweeps(store: Any) -> asyncio.Event:
    """Wrap the store's sweep so the test awaits the sweeper's first deletion instead of polling the clock."""
    deleted = asyncio.Event()
    sweep = store.asweep_ttl

    async def counting() -> int:
        n: int = await sweep()
        if n:
            deleted.set()
        return n

    store.asweep_ttl = counting
    return deleted


async def test_async_sqlite_lifecycle_is_awaitable(tmp_path: Path) -> None:
    clock = Clock()
    ttl = {"default_ttl": 1.0, "sweep_interval_minutes": 1e-4}  # 60 s items, a sweep every 6 ms
    async with AsyncSqliteStore.from_conn_string(tmp_path / "a.db", ttl=ttl, clock=clock) as store:  # type: ignore[arg-type]
        await store.setup()  # idempotent, awaitable as in LangGraph
        await store.aput(("a",), "k", {"v": 1}, ttl=None)
        await store.aput(("a",), "gone", {"v": 2})
        clock.advance(59)
        assert await store.sweep_ttl() == 0  # not yet expired
        clock.advance(2)
        assert await store.sweep_ttl() == 1
        deleted = _count_sweeps(store)
        task = await store.start_ttl_sweeper()
        assert isinstance(task, asyncio.Task) and await store.start_ttl_sweeper() is task
        await store.aput(("a",), "soon", {"v": 3})
        clock.advance(61)
        await asyncio.wait_for(deleted.wait(), timeout=10)  # the sweeper deletes the expired row itself
        assert store.conn.execute("SELECT count(*) FROM remem_items").fetchone()[0] == 1
        assert await store.aget(("a",), "k") is not None and not task.done()
        assert await store.stop_ttl_sweeper(timeout=5) is True and task.done()


@pytest.mark.postgres
async def test_async_postgres_lifecycle_is_awaitable(pg_url: str) -> None:
    clock = Clock()
    async with AsyncPostgresStore.from_conn_string(
        pg_url, pool_config={"min_size": 1, "max_size": 2}, clock=clock
    ) as store:
        await store.setup()
        await store.aput(("a",), "kept", {"v": 1})
        await store.aput(("a",), "gone", {"v": 2}, ttl=1)
        clock.advance(59)
        assert await store.sweep_ttl() == 0
        clock.advance(2)
        assert await store.sweep_ttl() == 1
        assert await store.aget(("a",), "kept") is not None
        deleted = _count_sweeps(store)
        task = await store.start_ttl_sweeper(sweep_interval_minutes=1e-4)
        await store.aput(("a",), "soon", {"v": 3}, ttl=1)
        clock.advance(61)
        await asyncio.wait_for(deleted.wait(), timeout=10)
        assert await store.aget(("a",), "soon") is None and await store.aget(("a",), "kept") is not None
        assert await store.stop_ttl_sweeper(timeout=10) is True and task.done()


def _sweep_that_loses_its_cancel(started: asyncio.Event, lost_as: str) -> Any:
    """A sweep whose cancel is lost as it can be in the drivers: cleaning up (a rollback on the connection
    the cancel closed) raises an error of its own in its place, or Python 3.11's wait_for (in
    psycopg_pool) swallows it and the sweep ends as if nothing happened."""
    lost: list[bool] = []

    async def sweep() -> int:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if lost:  # only the first time, so that a failing test still ends
                raise
            lost.append(True)
            if lost_as == "error":
                raise StorageError("PostgreSQL refused the work: the connection is closed") from None
        return 0

    return sweep


@pytest.mark.parametrize("lost_as", ["error", "nothing"])
async def test_a_sweeper_stopped_mid_sweep_stops_even_when_the_sweep_loses_the_cancel(
    tmp_path: Path, lost_as: str
) -> None:
    async with AsyncSqliteStore.from_conn_string(tmp_path / "a.db") as store:
        started = asyncio.Event()
        store.asweep_ttl = _sweep_that_loses_its_cancel(started, lost_as)  # type: ignore[method-assign]
        task = await store.start_ttl_sweeper(sweep_interval_minutes=1e-5)
        await asyncio.wait_for(started.wait(), timeout=10)
        assert await store.stop_ttl_sweeper(timeout=10) is True  # it swept on for ever before
        assert task.done()


@pytest.mark.postgres
async def test_a_cancelled_postgres_call_is_not_tried_again_on_a_new_connection(pg_url: str) -> None:
    async with AsyncPostgresStore.from_conn_string(pg_url) as store:
        await store.setup()
        started, calls = asyncio.Event(), []

        async def once(*args: Any) -> Any:
            calls.append(args)
            try:
                started.set()
                await asyncio.sleep(30)
            except asyncio.CancelledError:  # as the driver reports a cancel that closed its connection
                raise StorageError("the connection is closed") from psycopg.OperationalError("closed")

        store._arun_once = once  # type: ignore[method-assign]
        call = asyncio.create_task(store.asweep_ttl())  # straight to _arun, in this task
        await asyncio.wait_for(started.wait(), timeout=10)
        call.cancel()
        done, _ = await asyncio.wait([call], timeout=10)
        assert done and len(calls) == 1  # before: a second call on a new connection, cancel forgotten


@pytest.mark.postgres
def test_postgres_store_over_a_dict_row_connection_a_pipe_and_a_pool(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        store = PostgresStore(conn, index={"dims": DIMS, "embed": FakeEmbedder(DIMS), "fields": ["text"]})
        store.setup()
        _fill(store)
        assert store.get(("users", "u1"), "tea") is not None
        assert store.search(("users",), query="green tea", limit=1)[0].key == "tea"
        assert store.list_namespaces() == [("users", "u1")]
        with conn.pipeline() as pipe:
            piped = PostgresStore(conn, pipe=pipe)
            piped.put(("users", "u2"), "k", {"text": "through the pipeline"})
            assert piped.get(("users", "u2"), "k") is not None
    with PostgresStore.from_conn_string(pg_url, pipeline=True) as store:
        store.put(("p",), "k", {"text": "pipelined"})
        assert [i.key for i in store.search(("p",), query="pipelined")] == ["k"]
    with PostgresStore.from_conn_string(pg_url, pool_config={"min_size": 1, "max_size": 4}) as store:
        store.put(("pool",), "k", {"text": "pooled"})
        assert store.get(("pool",), "k") is not None
        assert store.get(("users", "u2"), "k") is not None  # the same database


def test_halfvec_is_accepted_and_stored_at_full_precision(make_store: Any) -> None:
    """Deliberate difference: ``ann_index_config={"vector_type": "halfvec"}`` is accepted, and vectors stay
    float32 (LangGraph's Postgres store would round them to 16 bits)."""
    embedder = FakeEmbedder(DIMS, seed=8)
    index = {
        "dims": DIMS,
        "embed": embedder,
        "fields": ["text"],
        "ann_index_config": {"vector_type": "halfvec"},
    }
    store = make_store(index=index, search_mode="vector")
    _fill(store)
    hit = store.search(("users",), query="green tea", limit=1)[0]
    assert hit.score == pytest.approx(
        _stock_similarity(embedder, "green tea", TEXTS[hit.key], "cosine"), abs=1e-6
    )


async def test_concurrent_async_calls_are_combined_and_each_gets_its_own_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncSqliteStore.from_conn_string(tmp_path / "c.db") as store:
        batches: list[int] = []
        inner = store.batch

        def counting(ops: Any) -> Any:
            batches.append(len(list(ops)))
            return inner(ops)

        monkeypatch.setattr(store, "batch", counting)
        calls = []
        for i in range(300):
            calls += [
                store.aput(("c", str(i % 3)), f"k{i}", {"n": i}),
                store.aget(("c", str(i % 3)), f"k{i - 1}"),
                store.asearch(("c",), limit=1),
            ]
        bad = store.aput(("c",), "bad", {"n": float("nan")})  # refused alone: the others still run
        results = await asyncio.gather(*calls, bad, return_exceptions=True)
        assert sum(batches) == 900 and len(batches) <= 3  # 900 calls, a transaction per 2000 ops at most
        assert isinstance(results[-1], ValueError)
        assert not any(isinstance(r, BaseException) for r in results[:-1])
        assert all(results[3 * i] is None for i in range(300))  # put results
        for i in range(300):
            item = await store.aget(("c", str(i % 3)), f"k{i}")
            assert item is not None and item.value == {"n": i}
        assert await store.aget(("c",), "bad") is None


@pytest.mark.postgres
@pytest.mark.parametrize("pool", [False, True])
async def test_async_postgres_runs_on_an_async_connection_and_sync_calls_on_a_sync_one(
    pg_url: str, pool: bool
) -> None:
    """Its async calls run on psycopg's async driver; sync calls, from other threads or from the loop's own
    (which LangGraph's store refuses), run over a sync connection of their own to the same database."""
    options: dict[str, Any] = {"pool_config": {"min_size": 1, "max_size": 2}} if pool else {}
    async with AsyncPostgresStore.from_conn_string(pg_url, **options) as store:
        assert isinstance(store.conn, psycopg.AsyncConnection | psycopg_pool.AsyncConnectionPool)
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as threads:
            futures = [threads.submit(store.put, ("t", str(i % 2)), f"k{i}", {"n": i}) for i in range(100)]
            await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        await store.aput(("t", "1"), "k7", {"n": "async"})
        item = store.get(("t", "1"), "k7")  # on the loop's thread: sees the async write
        assert item is not None and item.value == {"n": "async"}
        assert len(await store.asearch(("t",), limit=500)) == 100


@pytest.mark.postgres
def test_a_closed_memory_client_on_postgres_leaves_no_session_behind(pg_url: str) -> None:
    """Appends take the thread's lease on a connection of its own (as a graph run does on a saver): closing
    the memory client, and with it its PostgresStore, closes that session too, as stock stores leave none."""
    from remem import Memory
    from remem.config import Settings
    from tests.test_checkpoint_parity import _sessions

    with Memory.from_url(pg_url, settings=Settings(embedder="fake")) as memory:
        memory.thread("t", user_id="maya").add_messages([{"role": "user", "content": "tea by the river"}])
        assert [m.content for m in memory.thread("t").messages()] == ["tea by the river"]
    assert _sessions(pg_url) == []


@pytest.mark.postgres
@pytest.mark.parametrize("pool", [False, True])
async def test_async_postgres_cursor_is_a_context_manager_both_ways(pg_url: str, pool: bool) -> None:
    """LangGraph's async store test helpers run ``async with store._cursor()`` (stock AsyncPostgresStore's
    is async); remem's own helpers use ``with``: both work, on the async and the sync connection."""
    options: dict[str, Any] = {"pool_config": {"min_size": 1, "max_size": 2}} if pool else {}
    async with AsyncPostgresStore.from_conn_string(pg_url, **options) as store:
        await store.aput(("c",), "k", {"text": "seen both ways"})
        cursors = store._cursor(pipeline=True)
        async with cursors as acur:
            assert isinstance(acur, psycopg.AsyncCursor)
            await acur.execute("SELECT key FROM remem_items")
            assert await acur.fetchall() == [("k",)]
            with cursors as cur:  # the same object, entered the other way inside: its own cursor
                assert isinstance(cur, psycopg.Cursor)
                cur.execute("SELECT count(*) FROM remem_items")
                assert cur.fetchone() == (1,)
            assert not acur.closed
        assert acur.closed and cur.closed
        with store._cursor() as cur:
            cur.execute("DELETE FROM remem_items WHERE key = 'k'")
        assert await store.aget(("c",), "k") is None
