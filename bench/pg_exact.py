"""PostgreSQL without pgvector (the exact vector path): what a context card and plain searches cost and
read, with this code and (optionally) the code before.

    python bench/pg_exact.py --sizes 10000,100000
    git worktree add --detach /tmp/remem-before <commit>       # the code to compare with
    python bench/pg_exact.py --before /tmp/remem-before

For each size and code, a fresh database on ``--pg-url`` gets a thread of N messages through
``Memory.add_messages`` (fake embedder, 1,000 at a time; written by that code, so each code reads its own
schema), then ANALYZE (off the clock). Then, in a fresh process: the first card; a card refresh (one
exchange added, then the card again, in the same process, as a long-running worker would);
``--searches`` calls of ``memory.search`` on the thread. Printed per step: CPU seconds of the client
process, wall seconds, the vector searches the step made, and the vector rows it read from the database
(rows of every statement that reads stored embeddings). The server's CPU is not in the client's: the
rows read stand for it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bigthread import THREAD, _exchange, conversation

STEPS = ("card", "next-card", "searches")


def _settings() -> Any:
    from remem.config import Settings

    return Settings(embedder="fake")


def build(url: str, n: int) -> None:
    from remem import Memory

    messages = conversation(n)
    with Memory.from_url(url, settings=_settings()) as memory:
        thread = memory.thread(THREAD, user_id="bench-user")
        for start in range(0, n, 1000):
            thread.add_messages(messages[start : start + 1000])


def _counting(store: Any) -> dict[str, int]:
    """Counts the store's vector searches and the embedding rows its statements read."""
    from remem.store._postgres_sql import PostgresVectors

    counts = {"searches": 0, "rows": 0}
    search = PostgresVectors.search

    def counted_search(self: Any, *args: Any) -> Any:
        counts["searches"] += 1
        return (yield from search(self, *args))

    PostgresVectors.search = counted_search  # type: ignore[method-assign]
    execute = store._execute

    def counted_execute(conn: Any, request: Any) -> Any:
        rows = execute(conn, request)
        if "embedding FROM remem_vectors" in request.sql:
            counts["rows"] += len(rows)
        return rows

    store._execute = counted_execute
    return counts


def measure(url: str, n: int, searches: int) -> dict[str, Any]:
    from remem import Memory

    out: dict[str, Any] = {}
    with Memory.from_url(url, settings=_settings()) as memory:
        counts = _counting(memory.store)
        thread = memory.get_thread(THREAD)
        for step in STEPS:
            if step == "next-card":
                thread.add_messages(_exchange(n))  # off the clock
            counts.update(searches=0, rows=0)
            started, cpu = time.perf_counter(), time.process_time()
            if step == "searches":
                for i in range(searches):
                    memory.search(f"where does friend {i} live now", thread_id=THREAD)
            else:
                thread.get_context_card()
            out[step] = {
                "cpu": time.process_time() - cpu,
                "wall": time.perf_counter() - started,
                **counts,
            }
    return out


def _fresh_database(base: str) -> str:
    name = f"remem_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return str(psycopg.conninfo.make_conninfo(base, dbname=name))


def _drop_database(base: str, url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _spawn(code: Path | None, *args: str) -> dict[str, Any]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if code is not None:
        env["PYTHONPATH"] = str(code / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--sizes", default="10000,100000", help="thread lengths, comma-separated")
    parser.add_argument("--searches", type=int, default=20)
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        task, url, n = args.worker[0], args.worker[1], int(args.worker[2])
        if task == "build":
            started = time.process_time()
            build(url, n)
            with psycopg.connect(url, autocommit=True) as conn:  # fresh tables: the planner's statistics
                conn.execute("ANALYZE")
            print(json.dumps({"cpu": time.process_time() - started}))
        else:
            print(json.dumps(measure(url, n, args.searches)))
        return
    codes: list[tuple[str, Path | None]] = [("after", None)]
    if args.before is not None:
        codes.insert(0, ("before", args.before))
    print("| messages | code | step | CPU s | wall s | vector searches | vector rows read |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        for label, code in codes:
            url = _fresh_database(args.pg_url)
            try:
                built = _spawn(code, "build", url, str(n))
                print(f"| {n:,} | {label} | (build, CPU) | {built['cpu']:.1f} | | | |", flush=True)
                result = _spawn(code, "measure", url, str(n))
            finally:
                _drop_database(args.pg_url, url)
            for step in STEPS:
                r = result[step]
                print(
                    f"| {n:,} | {label} | {step} | {r['cpu']:.3f} | {r['wall']:.3f} | {r['searches']} "
                    f"| {r['rows']:,} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
