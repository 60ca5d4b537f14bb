"""How a context card reads: its reads share one read transaction on PostgreSQL (a read session of the
store, :meth:`RememStoreBase.reading`), and its independent reads go to the store together
(:func:`remem.memory._effects.together`). Work is counted (transactions, statements, store calls), never timed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from remem import Memory
from remem.config import Settings
from remem.memory._effects import StoreCall, SummarizeCall, together
from remem.server._tenancy import scoped_store
from remem.testing import FakeEmbedder


def _talk(memory: Memory, thread_id: str = "t1", turns: int = 12) -> Any:
    thread = memory.thread(thread_id, user_id="u1")
    for i in range(turns):
        thread.add_messages(
            [
                {"role": "user", "content": f"the invoice budget for flight {i}", "id": f"u{i}"},
                {"role": "assistant", "content": f"noted the hotel {i}", "id": f"a{i}"},
            ]
        )
    return thread


class Counted:
    """The transactions and statements a PostgreSQL store runs (wrapping its two I/O hooks)."""

    def __init__(self, store: Any) -> None:
        self.transactions = 0
        self.statements: list[str] = []
        transaction, execute = store._transaction, store._execute

        @contextlib.contextmanager
        def counted_transaction(*args: Any, **kwargs: Any) -> Iterator[Any]:
            self.transactions += 1
            with transaction(*args, **kwargs) as run_one:
                yield run_one

        def counted_execute(conn: Any, request: Any) -> Any:
            self.statements.append(request.sql)
            return execute(conn, request)

        store._transaction, store._execute = counted_transaction, counted_execute

    def reset(self) -> None:
        self.transactions, self.statements = 0, []


@pytest.mark.postgres
@pytest.mark.parametrize("served", [False, True], ids=["one-connection", "pool-tenant-view"])
def test_a_card_and_a_search_read_in_one_transaction_on_postgres(pg_url: str, served: bool) -> None:
    """A card that writes nothing reads the thread's metadata, its tail, its summary, a search and the
    hits' neighbours: two transactions, the second opened after the search's query was embedded, with no
    transaction open while the embedder runs (it was seven, each with its BEGIN and COMMIT), and 11
    statements (13: the tail's ids and the summary are one multi-get, a search's namespaces and whether
    they are all of them one statement). Through the server's tenant view on a pool too. A search: one
    transaction (three)."""
    pool = {"pool_size": 2} if served else {}
    with Memory.from_url(pg_url, settings=Settings(embedder="fake"), **pool) as base:
        memory = Memory(scoped_store(base.store, "acme")) if served else base
        thread = _talk(memory)
        thread.get_context_card(max_recent_messages=6, query="hotel")  # writes the summary it extends
        counted = Counted(base.store)
        card = thread.get_context_card(max_recent_messages=6, query="invoice budget")
        assert card.records and len(card.recent) == 6
        assert counted.transactions == 2
        assert len(counted.statements) <= 11
        counted.reset()
        hits = memory.search("invoice", thread_id="t1", k=5)
        assert hits and counted.transactions == 1
        counted.reset()
        assert thread.get_context_card(max_recent_messages=6, query="invoice budget") == card  # reads alike


def test_a_card_on_sqlite_makes_its_independent_reads_together(tmp_path: Any) -> None:
    """The tail's ids go with the summary, the tail's messages with the search: 5 store calls (7)."""
    with Memory.from_url(f"sqlite:///{tmp_path / 'm.db'}", settings=Settings(embedder="fake")) as memory:
        thread = _talk(memory)
        thread.get_context_card(max_recent_messages=6, query="hotel")  # writes the summary it extends
        calls: list[list[Any]] = []
        batch = memory.store.batch

        def counted(ops: Any) -> Any:
            calls.append(list(ops))
            return batch(ops)

        memory.store.batch = counted  # type: ignore[method-assign]
        card = thread.get_context_card(max_recent_messages=6, query="invoice budget")
        assert card.records and len(card.recent) == 6
        assert len(calls) <= 5


@pytest.mark.postgres
@pytest.mark.parametrize("pooled", [False, True], ids=["one-connection", "pool"])
def test_a_read_session_whose_connection_is_lost_reads_on_a_new_one(pg_url: str, pooled: bool) -> None:
    """The session's connection is ended by the server between two batches: the next batch runs on a new
    connection (the store's one retry), in a new transaction, and the session goes on."""
    from remem.store import PostgresStore

    pool = {"pool_config": {"min_size": 1, "max_size": 2}} if pooled else {}
    with PostgresStore.from_conn_string(pg_url, **pool) as store:  # type: ignore[arg-type]
        store.put(("a",), "k", {"text": "kept"})
        with store.reading() as reads:
            (first,) = reads([GetOp(("a",), "k")])
            with psycopg.connect(pg_url, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert ended is not None and ended[0] >= 1
            (again,) = reads([GetOp(("a",), "k")])
            (listed,) = reads([GetOp(("a",), "k")])
        assert first is not None and again is not None and listed is not None
        assert first.value == again.value == listed.value == {"text": "kept"}
        store.put(("a",), "k2", {"text": "the store writes after the session"})
        assert store.get(("a",), "k2") is not None


class _WatchingEmbedder(FakeEmbedder):
    """Notes, at each call, whether the store's connection is in a transaction."""

    def __init__(self) -> None:
        super().__init__()
        self.conn: psycopg.Connection[Any] | None = None
        self.seen: list[psycopg.pq.TransactionStatus] = []

    def embed_array(self, texts: list[str]) -> Any:
        if self.conn is not None:
            self.seen.append(self.conn.info.transaction_status)
        return super().embed_array(texts)


@pytest.mark.postgres
def test_a_read_sessions_query_is_embedded_with_no_transaction_open(pg_url: str) -> None:
    """A search after other reads in a session: the session's transaction is closed before the query's
    embedding (a remote embedder is a network round trip), and the search runs in a new one."""
    from remem.store import PostgresStore

    embedder = _WatchingEmbedder()
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["text"]}
    with PostgresStore.from_conn_string(pg_url, index=index) as store:  # type: ignore[arg-type]
        store.put(("a",), "k", {"text": "the hotel by the sea"})
        assert isinstance(store.conn, psycopg.Connection)
        embedder.conn = store.conn
        counted = Counted(store)
        with store.reading() as reads:
            (got,) = reads([GetOp(("a",), "k")])
            (hits,) = reads([SearchOp(("a",), query="a hotel")])
            (again,) = reads([GetOp(("a",), "k")])
        assert got is not None and again is not None and [h.key for h in hits] == ["k"]
        assert embedder.seen == [psycopg.pq.TransactionStatus.IDLE]
        assert counted.transactions == 2  # the get's, then the search's with the get after it


def _end_other_sessions(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert ended is not None and ended[0] >= 1


@pytest.mark.postgres
def test_a_ttl_refresh_read_in_a_session_outlives_the_sessions_transaction(pg_url: str) -> None:
    """A read's TTL refresh (a write) runs after the session, not nested in its transaction (a savepoint
    on one connection), where the session's connection lost by a later read took it along."""
    from remem.store import PostgresStore
    from tests.test_store import Clock

    clock = Clock()
    ttl = {"default_ttl": 1.0, "refresh_on_read": True, "omit_expired": True}  # 60 s
    with PostgresStore.from_conn_string(pg_url, ttl=ttl, clock=clock) as store:  # type: ignore[arg-type]
        store.put(("a",), "k", {"text": "kept"})
        clock.advance(35)
        with store.reading() as reads:
            (read,) = reads([GetOp(("a",), "k", refresh_ttl=True)])  # its expiry: 60 s from now
            _end_other_sessions(pg_url)  # the session's transaction ends with its connection
            assert reads([GetOp(("a",), "other")]) == [None]  # on a new connection (the store's retry)
        clock.advance(35)  # 70 s after the put, 35 s after the read
        assert read is not None and store.get(("a",), "k", refresh_ttl=False) is not None


@pytest.mark.postgres
def test_a_read_session_runs_no_write(pg_url: str) -> None:
    from remem.errors import RememUsageError
    from remem.store import PostgresStore

    with PostgresStore.from_conn_string(pg_url) as store, store.reading() as reads:
        with pytest.raises(RememUsageError, match="reads only"):
            reads([PutOp(("a",), "k", {"text": "x"})])
        assert reads([GetOp(("a",), "k")]) == [None]


def _reader(name: str, steps: int) -> Any:
    got = []
    for step in range(steps):
        (value,) = yield StoreCall([GetOp((name,), str(step))])
        got.append(value)
    return got


def test_together_sends_both_flows_store_calls_as_one_and_other_effects_alone() -> None:
    """Two flows' store calls go as one batch while both wait on one; each flow gets its own results; a
    model call runs alone, after the other flow's calls asked before it; the results are those the flows
    give run one after the other."""

    def summarising() -> Any:
        (value,) = yield StoreCall([GetOp(("s",), "0")])
        reply = yield SummarizeCall("", [])
        return value, reply

    sent: list[Any] = []

    def answer(effect: Any) -> Any:
        sent.append(effect)
        if isinstance(effect, SummarizeCall):
            return "summary"
        return [f"{op.namespace[0]}/{op.key}" for op in effect.ops]

    flow = together(_reader("a", 3), summarising())
    effect = next(flow)
    try:
        while True:
            effect = flow.send(answer(effect))
    except StopIteration as done:
        result = done.value
    assert result == (["a/0", "a/1", "a/2"], ("s/0", "summary"))
    shapes = [
        [f"{o.namespace[0]}/{o.key}" for o in e.ops] if isinstance(e, StoreCall) else "model" for e in sent
    ]
    assert shapes == [["a/0", "s/0"], ["a/1"], ["a/2"], "model"]
