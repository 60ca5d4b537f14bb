"""Benchmark: remem's checkpointers next to InMemorySaver and the stock SqliteSaver / PostgresSaver.

Workload (as in the issue): one thread, N turns (default 1,000) of a 40-word user message and a 60-word
reply through a plain MessagesState graph, default durability; a saver named ``KIND+delta`` runs the same
turns through a graph whose messages are a LangGraph ``DeltaChannel`` (beta; on by default in some of
LangChain's agents), which stores a snapshot every 100 updates and the writes between. Printed as one table:

  bytes on disk at 100/500/N turns and against the messages' text at N, ms per turn at 10/100/500/N (mean of the 20 turns up to each; also
  this process's CPU time per turn at N, which other load on the machine disturbs less),
  get_state at N (mean of 5), time travel (get_state at the checkpoint of turn N/2 - 7, mean of 5),
  list(get_state_history) at N (time and peak RSS, each saver in its own subprocess),
  8 threads x 100 turns on one shared saver (turns per second).

    python bench/checkpoint.py                      # everything, 1,000 turns (the stock savers take minutes)
    python bench/checkpoint.py --turns 200 --savers remem-sqlite,stock-sqlite
    python bench/checkpoint.py --turns 500 --savers remem-sqlite,remem-sqlite+delta,stock-sqlite+delta
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages

SAVERS = ("inmemory", "remem-sqlite", "remem-postgres", "stock-sqlite", "stock-postgres")
DELTA = "+delta"
DEFAULT_PG = os.environ.get("REMEM_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
_VOCABULARY = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had "
    "by word but not what all were we when your can said there use an each which she do how their if "
    "will up other about out many then them these so some her would make like him into time has look two "
    "more write go see number no way could people my than first water been call who oil its now find "
    "long down day did get come made may part memory thread message reply agent summary history model "
    "checkpoint state tool"
)
_WORDS = _VOCABULARY.split()


_LETTERS = "abcdefghijklmnopqrstuvwxyz"
TEXT = "english"
"""The workload's words: ``english`` (common English words) or ``random`` (random letters, 2-9 of them:
nothing a dictionary or a compressor has seen; the issue's held-out text)."""


def text(rng: random.Random, words: int) -> str:
    if TEXT == "random":
        said = " ".join("".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(words))
        return said.capitalize() + "."
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _add_batch(state: list[AnyMessage], writes: list[Any]) -> list[AnyMessage]:
    """``add_messages`` over a batch of writes at once (a DeltaChannel reducer folds batches)."""
    return add_messages(state, [m for w in writes for m in (w if isinstance(w, list) else [w])])


class DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_add_batch)]


def build_graph(saver: Any, delta: bool = False) -> Any:
    rng = random.Random(7)

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(text(rng, 60))]}

    builder = StateGraph(DeltaState if delta else MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "call_model")
    builder.add_edge("call_model", END)
    return builder.compile(checkpointer=saver)


# --- opening each saver on a fresh database -----------------------------------------------------------


@contextlib.contextmanager
def fresh_pg(admin_url: str) -> Iterator[str]:
    name = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def open_saver(kind: str, target: str) -> Iterator[Any]:
    """Open ``kind`` on ``target`` (a SQLite path or a Postgres URL), tables created."""
    if kind == "inmemory":
        yield InMemorySaver()
    elif kind == "remem-sqlite":
        from remem.checkpoint import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            saver.setup()
            yield saver
    elif kind == "remem-postgres":
        from remem.checkpoint import PostgresSaver

        with PostgresSaver.from_conn_string(target) as pg:
            pg.setup()
            yield pg
    elif kind == "stock-sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver as StockSqlite

        conn = sqlite3.connect(target, check_same_thread=False)
        try:
            stock = StockSqlite(conn)
            stock.setup()
            yield stock
        finally:
            conn.close()
    elif kind == "stock-postgres":
        from langgraph.checkpoint.postgres import PostgresSaver as StockPostgres
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        with ConnectionPool(target, kwargs=kwargs, min_size=1, max_size=10) as pool:
            stock_pg = StockPostgres(pool)  # type: ignore[arg-type]
            stock_pg.setup()
            yield stock_pg
    else:
        raise SystemExit(f"unknown saver {kind!r}; pick from {', '.join(SAVERS)}")


def storage_bytes(kind: str, saver: Any, target: str) -> int:
    """Bytes the saver's data takes: the SQLite file, the Postgres tables, or InMemorySaver's blobs."""
    if kind == "inmemory":
        total = sum(len(b[1]) for b in saver.blobs.values())
        total += sum(
            len(c[0][1]) + len(c[1][1])
            for ns in saver.storage.values()
            for cps in ns.values()
            for c in cps.values()
        )
        return total + sum(len(w[2][1]) for ws in saver.writes.values() for w in ws.values())
    if kind.endswith("sqlite"):
        with saver.lock:
            saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(target) + (
            os.path.getsize(target + "-wal") if os.path.exists(target + "-wal") else 0
        )
    prefix = "remem_cp_%" if kind.startswith("remem") else "checkpoint%"
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(oid)), 0) FROM pg_class WHERE relkind = 'r' AND relname LIKE %s",
            (prefix,),
        ).fetchone()
    return int(row[0]) if row else 0


def storage_breakdown(kind: str, target: str) -> dict[str, int]:
    """Bytes on disk by table and by index (remem's savers): SQLite's dbstat pages, PostgreSQL's heap
    (with TOAST, free-space and visibility maps) and each index apart."""
    if kind == "remem-sqlite":
        import sqlite3

        with contextlib.closing(sqlite3.connect(target)) as conn:
            rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        return {str(name): int(size) for name, size in rows}
    if kind == "remem-postgres":
        with psycopg.connect(target, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT relname, pg_total_relation_size(oid) - pg_indexes_size(oid) FROM pg_class"
                " WHERE relkind = 'r' AND relname LIKE 'remem_%'"
                " UNION ALL SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)"
                " FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relname LIKE 'remem_%'"
            ).fetchall()
        return {str(name): int(size) for name, size in rows}
    return {}


def breakdown_table(results: list[dict[str, Any]], turns: int) -> str:
    """Bytes a turn by table and index, for each saver with a breakdown."""
    lines = []
    for r in results:
        parts = sorted(r.get("breakdown", {}).items(), key=lambda kv: -kv[1])
        if parts:
            lines.append(
                f"{r['saver']}, bytes a turn at {turns}: "
                + ", ".join(f"{n} {b / turns:,.0f}" for n, b in parts)
            )
    return "\n".join(lines)


# --- measurements ------------------------------------------------------------------------------------


def run_one(
    name: str, turns: int, pg_admin: str, workers: int, worker_turns: int, storage_only: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"saver": name}
    kind, delta = name.removesuffix(DELTA), name.endswith(DELTA)
    with contextlib.ExitStack() as stack:
        if kind.endswith("postgres"):
            target = stack.enter_context(fresh_pg(pg_admin))
        else:
            target = os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "bench.db")
        saver = stack.enter_context(open_saver(kind, target))
        graph = build_graph(saver, delta)
        rng = random.Random(1)
        config = {"configurable": {"thread_id": "bench"}}
        times: list[float] = []
        cpu: list[float] = []
        old: dict[str, Any] | None = None
        for turn in range(1, turns + 1):
            start, start_cpu = time.perf_counter(), time.process_time()
            graph.invoke({"messages": [{"role": "user", "content": text(rng, 40)}]}, config)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            if turn == max(1, turns // 2) - 7:  # a checkpoint away from a snapshot (every 100 updates)
                old = graph.get_state(config).config
            if turn in (100, 500, turns):
                out[f"bytes@{turn}"] = storage_bytes(kind, saver, target)
            print(f"  {kind}: turn {turn}/{turns}", end="\r", file=sys.stderr, flush=True)
        for mark in (10, 100, 500, turns):
            if mark <= turns:
                window = times[max(0, mark - 20) : mark]  # the 20 turns up to the mark
                out[f"ms@{mark}"] = 1000 * sum(window) / len(window)
        out["cpu_ms"] = 1000 * sum(cpu[-20:]) / len(cpu[-20:])
        out["raw"] = sum(len(m.content.encode()) for m in graph.get_state(config).values["messages"])
        out["breakdown"] = storage_breakdown(kind, target)
        if storage_only:
            return out
        graph.get_state(config)
        start = time.perf_counter()
        for _ in range(5):
            graph.get_state(config)
        out["get_state_ms"] = 1000 * (time.perf_counter() - start) / 5
        start = time.perf_counter()
        for _ in range(5):
            graph.get_state(old)
        out["travel_ms"] = 1000 * (time.perf_counter() - start) / 5
        out["history"] = history_in_subprocess(name, target, turns)
        out["turns_per_s"] = (
            concurrent_turns(kind, pg_admin, workers, worker_turns, delta) if workers else 0.0
        )
    print(file=sys.stderr)
    return out


def history_in_subprocess(kind: str, target: str, turns: int) -> dict[str, Any]:
    """Times list(get_state_history) in a fresh process (InMemorySaver's has to replay the thread first)."""
    args = [sys.executable, __file__, "--history-child", kind, "--target", target, "--turns", str(turns)]
    args += ["--text", TEXT]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["failed"]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def history_child(name: str, target: str, turns: int) -> None:
    kind = name.removesuffix(DELTA)
    with open_saver(kind, target) as saver:
        graph = build_graph(saver, name.endswith(DELTA))
        config = {"configurable": {"thread_id": "bench"}}
        if kind == "inmemory":
            rng = random.Random(1)
            for _ in range(turns):
                graph.invoke({"messages": [{"role": "user", "content": text(rng, 40)}]}, config)
        reset_peak_rss()
        before = peak_rss_mb()
        start = time.perf_counter()
        snapshots = list(graph.get_state_history(config))
        seconds = time.perf_counter() - start
        peak = peak_rss_mb()
    print(json.dumps({"seconds": seconds, "peak_mb": peak, "before_mb": before, "n": len(snapshots)}))


def reset_peak_rss() -> None:
    """Start the peak-RSS count afresh (Linux): ru_maxrss carries a big parent's peak over fork and exec."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM) since :func:`reset_peak_rss`."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def concurrent_turns(kind: str, pg_admin: str, workers: int, worker_turns: int, delta: bool = False) -> float:
    """Turns per second of ``workers`` threads, each on its own thread id, sharing one saver."""
    with contextlib.ExitStack() as stack:
        if kind.endswith("postgres"):
            target = stack.enter_context(fresh_pg(pg_admin))
        else:
            target = os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "shared.db")
        saver = stack.enter_context(open_saver(kind, target))
        graph = build_graph(saver, delta)

        def work(i: int) -> None:
            rng = random.Random(100 + i)
            config = {"configurable": {"thread_id": f"worker-{i}"}}
            for _ in range(worker_turns):
                graph.invoke({"messages": [{"role": "user", "content": text(rng, 40)}]}, config)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return workers * worker_turns / (time.perf_counter() - start)


# --- the table ---------------------------------------------------------------------------------------


def _mb(n: Any) -> str:
    return "-" if n is None else f"{n / 1e6:,.2f} MB"


def table(results: list[dict[str, Any]], turns: int, workers: int, worker_turns: int) -> str:
    marks = [m for m in (100, 500, turns) if m <= turns]
    head = (
        ["saver"]
        + [f"storage @{m}" for m in dict.fromkeys(marks)]
        + [f"storage / text @{turns}"]
        + [f"ms/turn @{m}" for m in dict.fromkeys([m for m in (10, 100, 500, turns) if m <= turns])]
        + [
            f"CPU ms/turn @{turns}",
            f"get_state @{turns}",
            f"time travel @{max(1, turns // 2) - 7}",
            f"history @{turns} (time, peak RSS)",
            f"{workers}x{worker_turns} shared: turns/s",
        ]
    )
    rows = []
    for r in results:
        h = r.get("history", {})
        hist = "error" if "error" in h else f"{h.get('seconds', 0):.2f} s, {h.get('peak_mb', 0):,.0f} MB"
        rows.append(
            [r["saver"]]
            + [_mb(r.get(f"bytes@{m}")) for m in dict.fromkeys(marks)]
            + [f"{r[f'bytes@{turns}'] / r['raw']:.2f}x"]
            + [f"{r[f'ms@{m}']:.1f}" for m in dict.fromkeys([m for m in (10, 100, 500, turns) if m <= turns])]
            + [
                f"{r['cpu_ms']:.1f}",
                f"{r['get_state_ms']:.1f} ms",
                f"{r['travel_ms']:.1f} ms",
                hist,
                f"{r['turns_per_s']:.1f}",
            ]
        )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def storage_table(results: list[dict[str, Any]], turns: int) -> str:
    """The storage columns alone (``--storage-only``), with each saver against the first SQLite one."""
    sqlite = next((r[f"bytes@{turns}"] for r in results if r["saver"].endswith("sqlite")), None)
    head = ["saver", f"storage @{turns}", "text", "storage / text", "against the first SQLite saver"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        size = r[f"bytes@{turns}"]
        versus = "-" if not sqlite else f"{size / sqlite:.2f}x"
        lines.append(f"| {r['saver']} | {_mb(size)} | {_mb(r['raw'])} | {size / r['raw']:.2f}x | {versus} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument(
        "--savers",
        default=",".join(SAVERS),
        help="comma-separated, from: " + ", ".join(SAVERS) + f" (each also as NAME{DELTA})",
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG, help="a PostgreSQL URL allowed to create databases")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--worker-turns", type=int, default=100)
    parser.add_argument(
        "--text", choices=("english", "random"), default="english", help="the workload's words"
    )
    parser.add_argument(
        "--storage-only",
        action="store_true",
        help="only the storage columns, with bytes a turn by table and index",
    )
    parser.add_argument("--history-child", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global TEXT
    TEXT = args.text
    if args.history_child:
        history_child(args.history_child, args.target, args.turns)
        return
    results = []
    for kind in args.savers.split(","):
        started = time.perf_counter()
        results.append(
            run_one(kind.strip(), args.turns, args.pg_url, args.workers, args.worker_turns, args.storage_only)
        )
        print(f"{kind}: done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    if args.storage_only:
        print(storage_table(results, args.turns))
    else:
        print(table(results, args.turns, args.workers, args.worker_turns))
    print(breakdown_table(results, args.turns))


if __name__ == "__main__":
    main()
