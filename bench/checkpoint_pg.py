"""Benchmark: remem's PostgresSaver next to LangGraph's stock PostgresSaver under concurrency.

Workload: the one of ``bench/checkpoint.py`` (a 40-word user message and a 60-word reply per turn through a
plain MessagesState graph), each worker on its own thread id, all on one fresh database. Printed as one
table: turns per second with 1, 2, 4, 8 threads sharing one saver (one pool) and with 1, 2 processes of
one thread each; then the statements (BEGIN and COMMIT included) and round trips of one checkpoint write
(``put``) and of one ``put_writes``, counted with libpq's protocol trace on a single connection.

    python bench/checkpoint_pg.py                         # 50 turns per worker
    python bench/checkpoint_pg.py --turns 100 --threads 1,8 --processes 1,2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checkpoint as bench

SAVERS = ("remem-postgres", "stock-postgres")


def run_workers(kind: str, target: str, workers: int, turns: int, prefix: str) -> float:
    """Turns per second of ``workers`` threads sharing one saver, each on its own thread id."""
    with bench.open_saver(kind, target) as saver:
        graph = bench.build_graph(saver)

        def work(i: int) -> None:
            rng = random.Random(100 + i)
            config = {"configurable": {"thread_id": f"{prefix}-{i}"}}
            for _ in range(turns):
                graph.invoke({"messages": [{"role": "user", "content": bench.text(rng, 40)}]}, config)

        work(-1)  # warm up: tables created, pool filled, code loaded
        threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return workers * turns / (time.perf_counter() - start)


def run_processes(kind: str, target: str, processes: int, turns: int) -> float:
    """Turns per second of ``processes`` processes of one thread each, started together."""
    with bench.open_saver(kind, target):
        pass  # tables created before the children race for them
    go = tempfile.mktemp(prefix="bench-go-")
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                kind,
                "--target",
                target,
                "--turns",
                str(turns),
                "--go",
                go,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for c in children:  # each has imported, connected and run one turn before the clock starts
        assert c.stdout is not None and c.stdout.readline().strip() == "ready"
    open(go, "w").close()
    spans = []
    for c in children:  # each child's own clock from the go to its last turn: its exit is not timed
        out, _ = c.communicate()
        spans.append(json.loads(out.strip().splitlines()[-1]))
    os.unlink(go)
    return processes * turns / (max(end for _, end in spans) - min(start for start, _ in spans))


def child(kind: str, target: str, turns: int, go: str) -> None:
    with bench.open_saver(kind, target) as saver:
        graph = bench.build_graph(saver)
        rng = random.Random(os.getpid())
        config = {"configurable": {"thread_id": f"proc-{os.getpid()}"}}
        graph.invoke({"messages": [{"role": "user", "content": bench.text(rng, 40)}]}, config)
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        start = time.time()
        for _ in range(turns):
            graph.invoke({"messages": [{"role": "user", "content": bench.text(rng, 40)}]}, config)
        print(json.dumps([start, time.time()]), flush=True)


@contextlib.contextmanager
def traced(conn: Any) -> Iterator[list[str]]:
    """The frontend messages ``conn`` sends inside the block (libpq's trace, without timestamps)."""
    import psycopg.pq

    with tempfile.TemporaryFile("w+") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        sent: list[str] = []
        try:
            yield sent
        finally:
            conn.pgconn.untrace()
            out.seek(0)
            sent.extend(line.split("\t")[2].strip() for line in out if line.startswith("F\t"))


def round_trips(sent: list[str]) -> int:
    """Waits for the server among frontend messages: a simple Query, a Flush (a pipeline that wants
    rows), a Sync not followed by a Flush (an extended-protocol statement outside a pipeline)."""
    follows = [*sent[1:], ""]
    return sum(
        m in ("Query", "Flush") or (m == "Sync" and nxt != "Flush")
        for m, nxt in zip(sent, follows, strict=True)
    )


def count_writes(kind: str, target: str, turns: int = 6) -> dict[str, float]:
    """Statements and round trips per checkpoint write (``put``) and per ``put_writes`` at steady state
    (the last turns' calls), on one connection, each call traced alone."""
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        if kind == "remem-postgres":
            from remem.checkpoint import PostgresSaver

            saver: Any = PostgresSaver(conn)
        else:
            from langgraph.checkpoint.postgres import PostgresSaver as StockPostgres
            from psycopg.rows import dict_row

            conn.row_factory = dict_row  # type: ignore[assignment]
            saver = StockPostgres(conn)  # type: ignore[arg-type]
        saver.setup()
        graph = bench.build_graph(saver)
        rng = random.Random(3)
        calls: dict[str, list[list[str]]] = {"put": [], "put_writes": []}
        # A trace is per connection, and LangGraph saves a checkpoint and the next writes at once: each
        # transaction (remem) or call (stock) is traced alone and counted to the call its thread runs.
        one_at_a_time = threading.Lock()
        current = threading.local()

        def traced_call(name: str) -> Any:
            real = getattr(saver, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                current.sent = []
                if kind == "remem-postgres":
                    result = real(*args, **kwargs)
                else:
                    with one_at_a_time, traced(conn) as sent:
                        result = real(*args, **kwargs)
                    current.sent.extend(sent)
                calls[name].append(current.__dict__.pop("sent"))
                return result

            return call

        if kind == "remem-postgres":
            real_tx = saver._transaction

            @contextlib.contextmanager
            def transaction(write: bool, snapshot: bool = True) -> Iterator[Any]:
                with one_at_a_time, traced(conn) as sent, real_tx(write, snapshot) as run_one:
                    yield run_one
                if hasattr(current, "sent"):
                    current.sent.extend(sent)

            saver._transaction = transaction
        saver.put, saver.put_writes = traced_call("put"), traced_call("put_writes")
        config = {"configurable": {"thread_id": "counted"}}
        for _ in range(turns):
            graph.invoke({"messages": [{"role": "user", "content": bench.text(rng, 40)}]}, config)
    out = {}
    for name, traces in calls.items():
        last = traces[-3 * (turns // 2) :]
        out[f"{name} statements"] = sum(m in ("Query", "Execute") for t in last for m in t) / len(last)
        out[f"{name} round trips"] = sum(round_trips(t) for t in last) / len(last)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=50, help="turns per worker")
    parser.add_argument("--threads", default="1,2,4,8")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--savers", default=",".join(SAVERS))
    parser.add_argument("--pg-url", default=bench.DEFAULT_PG)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.target, args.turns, args.go)
        return
    kinds = args.savers.split(",")
    threads = [int(n) for n in args.threads.split(",") if n]
    processes = [int(n) for n in args.processes.split(",") if n]
    results: dict[str, dict[str, Any]] = {k: {} for k in kinds}
    for n in threads:  # savers interleaved per column, so a change of load hits both alike
        for kind in kinds:
            with bench.fresh_pg(args.pg_url) as target:
                results[kind][f"{n} threads"] = run_workers(kind, target, n, args.turns, "w")
            print(f"  {kind}: {n} threads done", file=sys.stderr, flush=True)
    for n in processes:
        for kind in kinds:
            with bench.fresh_pg(args.pg_url) as target:
                results[kind][f"{n} proc"] = run_processes(kind, target, n, args.turns)
            print(f"  {kind}: {n} processes done", file=sys.stderr, flush=True)
    for kind in kinds:
        with bench.fresh_pg(args.pg_url) as target:
            results[kind].update(count_writes(kind, target))
    cols = [f"{n} threads" for n in threads] + [f"{n} proc" for n in processes]
    counted = ["put statements", "put round trips", "put_writes statements", "put_writes round trips"]
    head = ["saver", *[f"{c}: turns/s" for c in cols], *[f"{c} (per call)" for c in counted]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kind in kinds:
        r = results[kind]
        cells = [f"{r[c]:.1f}" for c in cols] + [f"{r[c]:.1f}" for c in counted]
        lines.append("| " + " | ".join([kind, *cells]) + " |")
    if set(kinds) == set(SAVERS):
        ratio = [f"{results[SAVERS[0]][c] / results[SAVERS[1]][c]:.2f}x" for c in cols]
        lines.append("| " + " | ".join(["remem / stock", *ratio, *[""] * len(counted)]) + " |")
    print("\n".join(lines))
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
