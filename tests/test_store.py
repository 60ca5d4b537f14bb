"""remem's stores on every backend: LangGraph's BaseStore contract, search, TTL, graphs."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp

from remem.erasure import ForgetReport, aforget, forget
from remem.errors import ConfigError, RememUsageError
from remem.layout import thread_messages, user_memories
from remem.store import (
    AsyncSqliteStore,
    InvalidFilterError,
    ScoredItem,
    SqliteStore,
    hybrid_search,
)
from remem.testing import FakeEmbedder

INDEX = {"dims": 32, "fields": ["text"]}


def _index(**extra: Any) -> dict[str, Any]:
    return {**INDEX, "embed": FakeEmbedder(32, seed=1), **extra}


def test_put_get_update_delete(make_store: Any) -> None:
    clock = Clock()
    store = make_store(clock=clock)
    ns = ("users", "u1", "memories")
    assert store.get(ns, "a") is None
    store.put(ns, "a", {"text": "first", "n": 1})
    item = store.get(ns, "a")
    assert item is not None and item.value == {"text": "first", "n": 1} and item.namespace == ns
    created = item.created_at
    clock.advance(0.01)
    store.put(ns, "a", {"text": "second"})
    again = store.get(ns, "a")
    assert again is not None and again.value == {"text": "second"}
    assert again.created_at == created and again.updated_at > created
    store.delete(ns, "a")
    assert store.get(ns, "a") is None
    store.delete(ns, "never-there")  # deleting a missing key is not an error


def test_batch_reads_see_state_before_puts(make_store: Any) -> None:
    store = make_store()
    ns = ("docs",)
    store.put(ns, "k", {"v": 1})
    results = store.batch([PutOp(ns, "k", {"v": 2}), GetOp(ns, "k"), PutOp(ns, "k", {"v": 3})])
    assert results[0] is None and results[2] is None
    assert results[1].value == {"v": 1}
    assert store.get(ns, "k").value == {"v": 3}  # last put wins


def test_search_filters_offset_limit_order(make_store: Any) -> None:
    store = make_store()
    for i in range(12):
        store.put(("docs", "a" if i % 2 else "b"), f"k{i:02}", {"i": i, "kind": "odd" if i % 2 else "even"})
    everything = store.search(("docs",), limit=100)
    # as LangGraph's SQL stores list: the most recently updated first
    assert [it.key for it in everything] == [f"k{i:02}" for i in range(11, -1, -1)]
    assert [it.key for it in store.search(("docs",), limit=3, offset=2)] == [it.key for it in everything[2:5]]
    odd = store.search(("docs",), filter={"kind": "odd"}, limit=100)
    assert {it.value["i"] for it in odd} == {1, 3, 5, 7, 9, 11}
    assert {it.value["i"] for it in store.search(("docs",), filter={"i": {"$gte": 9}})} == {9, 10, 11}
    assert {it.value["i"] for it in store.search(("docs",), filter={"i": {"$lt": 2}, "kind": "even"})} == {0}
    assert {it.value["i"] for it in store.search(("docs",), filter={"kind": {"$ne": "odd"}}, limit=3)} == {
        10,
        8,
        6,
    }
    assert store.search(("docs", "a"), filter={"kind": "even"}) == []
    assert store.search(("nothing",)) == []
    with pytest.raises(InvalidFilterError):
        store.search(("docs",), filter={"i": {"$regex": ".*"}})


def test_nested_and_list_filters(make_store: Any) -> None:
    store = make_store()
    store.put(("f",), "1", {"meta": {"lang": "pt", "n": 2}, "tags": ["a", "b"]})
    store.put(("f",), "2", {"meta": {"lang": "en", "n": 2}, "tags": ["a"]})
    assert [i.key for i in store.search(("f",), filter={"meta": {"lang": "pt"}})] == ["1"]
    assert [i.key for i in store.search(("f",), filter={"tags": ["a"]})] == ["2"]
    assert [i.key for i in store.search(("f",), filter={"weird key 'x'": None})] == ["2", "1"]  # newest first


def test_list_namespaces_prefix_suffix_depth(make_store: Any) -> None:
    store = make_store()
    for ns in [
        ("users", "u1", "memories"),
        ("users", "u2", "memories"),
        ("threads", "t1", "messages"),
        ("a",),
    ]:
        store.put(ns, "k", {"x": 1})
    assert store.list_namespaces() == sorted(
        [("users", "u1", "memories"), ("users", "u2", "memories"), ("threads", "t1", "messages"), ("a",)]
    )
    assert store.list_namespaces(prefix=("users",)) == [
        ("users", "u1", "memories"),
        ("users", "u2", "memories"),
    ]
    assert store.list_namespaces(suffix=("messages",)) == [("threads", "t1", "messages")]
    assert store.list_namespaces(prefix=("users", "*", "memories")) == [
        ("users", "u1", "memories"),
        ("users", "u2", "memories"),
    ]
    assert store.list_namespaces(max_depth=1) == [("a",), ("threads",), ("users",)]
    assert store.list_namespaces(limit=2, offset=1) == store.list_namespaces()[1:3]
    store.delete(("a",), "k")
    assert ("a",) not in store.list_namespaces()
    ops = [ListNamespacesOp(match_conditions=None, max_depth=2)]
    assert store.batch(ops)[0] == [("threads", "t1"), ("users", "u1"), ("users", "u2")]


def test_namespace_validation(make_store: Any) -> None:
    store = make_store()
    for bad in [(), ("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"x": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("x\x00y",), "k", {"v": 1})])
    with pytest.raises(RememUsageError):
        store.put(("ok",), "k\x00", {"x": 1})


def test_a_batch_checks_each_namespace_once_and_still_refuses_a_bad_one(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of gets in one namespace checks its labels once, not once a get (a summary catch-up reads
    its backlog 512 gets a batch); a bad namespace among good ones, or an unhashable one, is still refused."""
    from remem.store import _core

    store = make_store()
    store.batch([PutOp(("d",), f"k{i}", {"v": i}) for i in range(20)])
    checked: list[tuple[str, ...]] = []
    validate = _core.validate_namespace

    def counting(namespace: Any, **kwargs: Any) -> None:
        checked.append(namespace)
        validate(namespace, **kwargs)

    monkeypatch.setattr(_core, "validate_namespace", counting)
    got = store.batch([GetOp(("d",), f"k{i}") for i in range(20)] + [GetOp(("e",), "k0")])
    assert [item.value["v"] for item in got[:20]] == list(range(20)) and got[20] is None
    assert checked == [("d",), ("e",)]
    for bad in [("a.b",), (["x"],)]:
        with pytest.raises(InvalidNamespaceError):
            store.batch([GetOp(("d",), "k0"), GetOp(bad, "k1")])  # type: ignore[arg-type]


def test_keyword_search_without_index(make_store: Any) -> None:
    store = make_store()
    store.put(("d",), "1", {"text": "the quick brown fox jumps"})
    store.put(("d",), "2", {"text": "a lazy dog sleeps"})
    store.put(("d",), "3", {"other": "foxes are quick"})
    hits = store.search(("d",), query="quick fox")
    assert {h.key for h in hits} == {"1", "3"}  # stemmed: "foxes" matches "fox"; "2" shares no word
    # no index: the search is by keyword, and says so; the score is a relevance in [0, 1]
    assert all(isinstance(h, ScoredItem) and h.mode == "keyword" for h in hits)
    assert all(h.score is not None and 0 < h.score < 1 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    with pytest.raises(ConfigError):
        hybrid_search(store, ("d",), "fox", mode="vector")


def test_hybrid_modes_scores_and_filters(make_store: Any) -> None:
    store = make_store(index=_index())
    ns = user_memories("u1")
    store.put(ns, "tea", {"text": "prefers green tea every morning", "kind": "preference"})
    store.put(ns, "cat", {"text": "has a cat named Miso", "kind": "fact"})
    store.put(ns, "job", {"text": "works as a nurse in Porto", "kind": "fact"})
    store.put(user_memories("u2"), "tea", {"text": "hates green tea", "kind": "preference"})
    for mode in ("keyword", "vector", "hybrid"):
        hits = hybrid_search(store, ("users", "u1"), "green tea", mode=mode, limit=3)
        assert hits[0].key == "tea" and hits[0].namespace == ns, mode
        assert all(h.mode == mode for h in hits)
        order = [h.scores["fused"] if mode == "hybrid" else h.score for h in hits]
        assert order == sorted(order, reverse=True)  # hybrid hits come in fused order
    fused = hybrid_search(store, ("users",), "green tea", limit=5)
    top = fused[0]
    assert {"keyword", "vector", "keyword_rank", "vector_rank", "fused"} <= set(top.scores)
    assert 0 < top.scores["fused"] <= 1  # the weighted sum of its two scaled scores (remem.store._fusion)
    # every hybrid hit's score is its vector similarity, keyword-only hits included
    assert all(h.score == h.scores["vector"] for h in fused)
    only_facts = hybrid_search(store, ("users", "u1"), "green tea", filter={"kind": "fact"})
    assert {h.key for h in only_facts} <= {"cat", "job"}
    assert hybrid_search(store, ("users", "u1"), "green tea", limit=1, offset=1)[0].key != "tea"
    # the default search() uses hybrid mode when the store has an index
    assert store.search(("users", "u1"), query="green tea")[0].key == "tea"


def test_index_fields_and_per_put_index(make_store: Any) -> None:
    embedder = FakeEmbedder(32, seed=2)
    store = make_store(index={"dims": 32, "embed": embedder, "fields": ["text"]})
    store.put(("d",), "a", {"text": "alpha", "other": "zeta"})
    store.put(("d",), "b", {"text": "beta", "other": "alpha"}, index=["other"])
    store.put(("d",), "c", {"text": "alpha"}, index=False)
    vec = hybrid_search(store, ("d",), "alpha", mode="vector", limit=10)
    assert {h.key for h in vec} == {"a", "b"}
    assert vec[0].score == pytest.approx(1.0, abs=1e-5)
    calls = embedder.texts_embedded
    store.put(("d",), "a", {"text": "alpha", "other": "changed"})  # same text: not embedded again
    assert embedder.texts_embedded == calls
    store.put(("d",), "a", {"text": "gamma"})
    assert embedder.texts_embedded == calls + 1
    assert hybrid_search(store, ("d",), "gamma", mode="vector")[0].key == "a"


def test_list_field_embeds_each_element(make_store: Any) -> None:
    store = make_store(index={"dims": 32, "embed": FakeEmbedder(32), "fields": ["tags[*]"]})
    store.put(("d",), "x", {"tags": ["red apple", "blue sky"]})
    store.put(("d",), "y", {"tags": ["green grass"]})
    assert hybrid_search(store, ("d",), "blue sky", mode="vector")[0].key == "x"
    assert store.stats()["vectors"] == 3


class Clock:
    """A clock the test moves: TTLs are tested without sleeping."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_ttl_expiry_refresh_and_sweep(make_store: Any) -> None:
    clock = Clock()
    ttl = {"default_ttl": 1.0, "refresh_on_read": True, "omit_expired": True}  # 60 s; expired: unseen
    store = make_store(ttl=ttl, clock=clock)
    store.put(("t",), "short", {"v": 1})
    store.put(("t",), "forever", {"v": 2}, ttl=None)
    store.put(("t",), "norefresh", {"v": 3})
    clock.advance(35)
    assert store.get(("t",), "short") is not None  # read refreshes the TTL
    assert store.get(("t",), "norefresh", refresh_ttl=False) is not None
    clock.advance(35)  # 70 s after the puts, 35 s after the refresh
    assert store.get(("t",), "short", refresh_ttl=False) is not None
    assert store.get(("t",), "norefresh") is None  # expired: invisible before any sweep
    assert {i.key for i in store.search(("t",))} == {"short", "forever"}
    assert store.sweep_ttl() == 1
    assert store.stats()["items"] == 2
    clock.advance(61)  # "short" expires 60 s after its last read (the search above); "forever" never
    assert store.get(("t",), "short") is None and store.get(("t",), "forever") is not None
    assert store.sweep_ttl() == 1


def test_ttl_sweeper_thread(make_store: Any) -> None:
    clock = Clock()
    store = make_store(clock=clock)
    store.put(("t",), "k", {"v": 1}, ttl=1)
    store.put(("t",), "kept", {"v": 2})
    deleted = threading.Event()
    sweep = store._sweep_now

    def counting() -> int:  # the test waits for the sweeper's deletion, not on the clock
        n: int = sweep()
        if n:
            deleted.set()
        return n

    store._sweep_now = counting
    thread = store.start_ttl_sweeper(sweep_interval_minutes=1e-4)  # every 6 ms
    assert store.start_ttl_sweeper() is thread
    clock.advance(61)
    assert deleted.wait(10)
    assert store.get(("t",), "k") is None and store.stats()["items"] == 1
    assert store.stop_ttl_sweeper(timeout=2) and not thread.is_alive()


def test_graph_compile_with_store_and_runtime_store(make_store: Any) -> None:
    store = make_store(index=_index())

    class State(TypedDict):
        question: str
        answer: str

    def remember(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.put(user_memories("u9"), "fav", {"text": "favourite colour is teal"})
        return {}

    def recall(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        hits = runtime.store.search(("users", "u9"), query=state["question"], limit=1)
        return {"answer": hits[0].value["text"]}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    graph = builder.compile(store=store)
    assert graph.invoke({"question": "what colour?"})["answer"] == "favourite colour is teal"


def test_forget_report_type(make_store: Any) -> None:
    store = make_store()
    store.put(thread_messages("t1"), "m1", {"text": "hi", "user_id": "u1"})
    report = forget(store, thread_id="t1")
    assert isinstance(report, ForgetReport) and report.items == 1
    with pytest.raises(RememUsageError):
        forget(store, user_id="a", thread_id="b")


def test_dims_mismatch_is_a_config_error(make_store: Any) -> None:
    store = make_store(index={"dims": 16, "embed": FakeEmbedder(32)})
    with pytest.raises(ConfigError, match="dims"):
        store.put(("d",), "k", {"text": "x"})


def test_setup_is_idempotent_and_reopen_keeps_data(tmp_path: Any) -> None:
    path = tmp_path / "again.db"
    for _ in range(2):
        with SqliteStore.from_conn_string(f"sqlite:///{path}", index=_index()) as store:
            store.setup()
            store.put(("d",), "k", {"text": "persisted words"})
    with SqliteStore.from_conn_string(path, index=_index()) as store:
        assert store.get(("d",), "k") is not None
        assert hybrid_search(store, ("d",), "persisted", mode="vector")[0].key == "k"


def test_vector_cache_sees_other_connections_writes(tmp_path: Any) -> None:
    path = tmp_path / "shared.db"
    with (
        SqliteStore.from_conn_string(path, index=_index()) as a,
        SqliteStore.from_conn_string(path, index=_index()) as b,
    ):
        a.put(("d",), "1", {"text": "apples"})
        assert hybrid_search(b, ("d",), "apples", mode="vector")[0].key == "1"
        b.put(("d",), "2", {"text": "pears"})
        b.delete(("d",), "1")
        assert [h.key for h in hybrid_search(a, ("d",), "apples", mode="vector")] == ["2"]


async def test_async_sqlite_store(tmp_path: Any) -> None:
    async with AsyncSqliteStore.from_conn_string(tmp_path / "a.db", index=_index()) as store:
        await store.aput(("users", "u"), "k", {"text": "async memory about sailing"})
        item = await store.aget(("users", "u"), "k")
        assert item is not None and item.value["text"].startswith("async")
        hits = await store.asearch(("users",), query="sailing")
        assert hits[0].key == "k"
        results = await store.abatch([SearchOp(("users",), None, 10, 0, None), ListNamespacesOp()])
        assert len(results[0]) == 1 and results[1] == [("users", "u")]
        await asyncio.gather(*(store.aput(("users", "u"), f"k{i}", {"text": f"n{i}"}) for i in range(10)))
        assert len(await store.asearch(("users", "u"), limit=50)) == 11
        report = await aforget(store, user_id="u")
        assert report.items == 11
        await store.adelete(("users", "u"), "k")


def test_keyword_search_keeps_rare_terms_on_a_large_index(tmp_path: Any) -> None:
    with SqliteStore.from_conn_string(tmp_path / "k.db", keyword_budget=20) as store:
        store.batch([PutOp(("d",), f"c{i}", {"text": f"common filler words number {i}"}) for i in range(200)])
        store.put(("d",), "rare", {"text": "common filler zebra"})
        store.put(("d",), "both", {"text": "common filler zebra okapi"})
        store.put(("other",), "rare", {"text": "zebra outside the prefix"})
        hits = hybrid_search(store, ("d",), "common zebra okapi", mode="keyword", limit=5)
        assert [h.key for h in hits] == ["both", "rare"]  # "common" (in every item) was left out
        # every term too common for the budget: all of them are required
        assert [h.key for h in hybrid_search(store, ("d",), "common filler", mode="keyword", limit=3)]
        assert {h.key for h in hybrid_search(store, ("d",), "words number 7", mode="keyword")} == {"c7"}
        only = hybrid_search(store, ("d",), "zebra", mode="keyword", filter={"text": "common filler zebra"})
        assert [h.key for h in only] == ["rare"]
        assert hybrid_search(store, ("nothing",), "zebra", mode="keyword") == []
        # one term in every item: the newest matches are ranked, not all of them
        newest = {f"c{i}" for i in range(170, 200)} | {"rare", "both"}
        hits = hybrid_search(store, ("d",), "filler", mode="keyword", limit=5)
        assert len(hits) == 5 and {h.key for h in hits} <= newest


def test_group_commit_reads_its_own_writes_and_commits_on_time(tmp_path: Any) -> None:
    path = tmp_path / "group.db"
    with (
        SqliteStore.from_conn_string(path, commit_interval=0.2) as store,
        SqliteStore.from_conn_string(path) as other,
    ):
        for i in range(5):
            store.put(("g",), f"k{i}", {"text": f"queued {i}"})
        assert other.get(("g",), "k0") is None  # not committed yet
        assert store.get(("g",), "k4") is not None  # a read commits the queue first
        assert other.get(("g",), "k4") is not None
        store.put(("g",), "late", {"text": "committed by the timer"})
        deadline = time.time() + 5
        while other.get(("g",), "late") is None and time.time() < deadline:
            time.sleep(0.05)
        assert other.get(("g",), "late") is not None
        with pytest.raises(RememUsageError):
            store.put(("g",), "bad", {"x": float("nan")})  # refused at once, not in the background
        store.put(("g",), "last", {"text": "committed on close"})
    with SqliteStore.from_conn_string(path) as reopened:
        assert reopened.get(("g",), "last") is not None
        assert reopened.get(("g",), "bad") is None


def test_keyword_budget_on_every_backend(make_store: Any) -> None:
    store = make_store(keyword_budget=20)
    store.batch([PutOp(("d",), f"c{i}", {"text": f"common filler words number {i}"}) for i in range(200)])
    store.put(("d",), "rare", {"text": "common filler zebra"})
    if hasattr(store.conn, "pgconn"):
        store.conn.execute("ANALYZE remem_items")
    assert [h.key for h in hybrid_search(store, ("d",), "common zebra", mode="keyword")] == ["rare"]
    hits = hybrid_search(store, ("d",), "filler", mode="keyword", limit=5)
    assert len(hits) == 5 and {h.key for h in hits} <= {f"c{i}" for i in range(150, 200)} | {"rare"}


@pytest.mark.postgres
async def test_async_postgres_store(pg_url: str) -> None:
    from remem.store import AsyncPostgresStore

    async with AsyncPostgresStore.from_conn_string(pg_url, index=_index()) as store:
        await store.aput(("users", "u"), "k", {"text": "async memory about sailing"})
        assert (await store.asearch(("users",), query="sailing"))[0].key == "k"
        hits = await store.ahybrid_search(("users",), "sailing", mode="keyword")
        assert [h.key for h in hits] == ["k"]
        assert (await store.alist_namespaces()) == [("users", "u")]
        assert (await aforget(store, user_id="u")).items == 1
        assert await store.aget(("users", "u"), "k") is None
