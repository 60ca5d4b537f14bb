"""Benchmark: ``remem serve`` under concurrent clients, next to the library called in-process (the floor).

N clients (threads of this process) x M turns. Each client keeps a thread of its own, and each turn is

- add: the user's message and the assistant's reply (ids given, so a retry would store nothing twice);
- card: the thread's context card for the user's message (``query``, 6 recent messages);
- search: hybrid search of the thread for the user's message (``k=5``).

One run measures, in order: the library in-process on SQLite; ``remem serve`` (one process) on the same kind
of SQLite file; the library in-process on PostgreSQL; ``remem serve`` on PostgreSQL with 1 and 2 workers
(``--workers 1 2 4`` for more). Each setup gets a fresh SQLite file or a fresh PostgreSQL database (dropped
after), the server a tenant key (``X-Api-Key``, rate limit off) and the HTTP clients
``Memory.from_url("http://...", api_key=...)``, ``--connections`` of them each (4), used in turn one turn at
a time; the in-process clients one shared ``Memory``. Every client first plays unmeasured turns
(``--warmup``, at least one per connection) on a thread of its own (imports, pools, a worker's first request).
With several workers, each kept-alive connection stays on the worker the kernel gave it (``SO_REUSEPORT``
hashes new connections over the workers' sockets): with one connection per client, 4 clients fell 3/1 on 2
workers; the split is printed.
After the measured turns every thread is read back (through the server for the server setups) and compared
with the adds that were acknowledged: lost, duplicated and out-of-order messages must be 0.

    python bench/service.py                                 # 4 clients x 20 turns (about 2 minutes on 2 cores)
    python bench/service.py --clients 8 --turns 100 --workers 1 2 4
    python bench/service.py --only-sqlite                   # no PostgreSQL
    python bench/service.py --clients 1 --turns 50          # latency with no queueing

Prints one Markdown table (turns per second, p50 / p95 / p99 per endpoint in ms, error rate, messages lost /
duplicated / out of order, CPU seconds used during the measured turns, in all and per turn: this process (the
clients, and the library itself in-process), the ``remem serve`` process tree, and PostgreSQL's backends
serving the run's database; and how many cores those kept busy), then the issue's targets, each met or not. Embeddings come from the fake embedder on both sides
(``REMEM_EMBEDDER=fake``), so the numbers are remem's and the transport's, not a model's. Everything runs on
loopback; the client, the server and the database share the machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent))
os.environ["REMEM_EMBEDDER"] = "fake"  # the in-process side as the server's (tests/server_process.py sets it)

from store import fresh_database
from tests.server_process import Server, start_server

from remem import Memory

ENDPOINTS = ("add", "card", "search")
WORDS = (
    "invoice",
    "budget",
    "flight",
    "hotel",
    "garden",
    "recipe",
    "deadline",
    "meeting",
    "report",
    "doctor",
    "train",
    "ticket",
    "paint",
    "kitchen",
    "river",
    "camera",
    "laptop",
    "contract",
    "salary",
    "holiday",
    "museum",
    "concert",
    "lesson",
    "piano",
    "bike",
    "insurance",
    "tax",
    "loan",
    "birthday",
    "gift",
    "dinner",
    "client",
    "project",
    "review",
    "launch",
    "backup",
    "server",
    "printer",
    "window",
    "coffee",
)


@dataclass
class Outcome:
    name: str
    clients: int
    turns: int = 0
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {e: [] for e in ENDPOINTS})
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""
    lost: int = 0
    duplicated: int = 0
    disordered: int = 0
    unacknowledged: int = 0
    cpu_client: float = 0.0
    cpu_server: float | None = None
    cpu_db: float | None = None
    spread: str = ""  # the clients' connections per server worker

    def calls(self) -> int:
        return sum(len(v) for v in self.latencies.values()) + sum(self.errors.values())


def utterance(rng: random.Random, n: int = 14) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


# ----------------------------------------------------------------------------- CPU


def cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_of(pids: list[int]) -> dict[int, float]:
    found = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            found[pid] = times.user + times.system
    return found


def server_pids(server: Server | None) -> list[int]:
    if server is None:
        return []
    root = psutil.Process(server.process.pid)
    return [root.pid, *(p.pid for p in root.children(recursive=True))]


def connections_per_worker(server: Server | None) -> str:
    """How the clients' kept-alive connections fell on the workers (the kernel hands each to one)."""
    if server is None:
        return ""
    port = int(server.url.rsplit(":", 1)[1])
    counts = []
    for pid in server_pids(server):
        with contextlib.suppress(psutil.Error):
            found = psutil.Process(pid).net_connections(kind="tcp")
            mine = sum(1 for c in found if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port)
            if mine:
                counts.append(mine)
    return "/".join(str(n) for n in sorted(counts, reverse=True))


def backend_pids(admin_url: str, database: str | None) -> list[int]:
    if database is None:
        return []
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
    return [int(r[0]) for r in rows]


def used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two readings (a process born in between counts from zero)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


# ----------------------------------------------------------------------------- the clients


class Client(threading.Thread):
    """One client: its turns on one thread, each turn's three calls on one of ``memories`` in turn (one
    connection each over HTTP, so that several workers share a client's load)."""

    def __init__(
        self,
        index: int,
        memories: list[Memory],
        run: str,
        turns: tuple[int, int],
        start: threading.Barrier,
    ) -> None:
        super().__init__(daemon=True)
        self.index, self.memories, self.start_line = index, memories, start
        self.memory = memories[0]
        self.warmup, self.turns = turns
        self.thread_id = f"{run}-c{index}"
        self.rng = random.Random(index)
        self.acked: list[str] = []
        self.latencies: dict[str, list[float]] = {e: [] for e in ENDPOINTS}
        self.errors: Counter[str] = Counter()
        self.first_error = ""

    def timed(self, endpoint: str, call: Callable[[], Any], record: bool) -> Any:
        began = time.perf_counter()
        try:
            result = call()
        except Exception as exc:  # counted and reported, the run goes on
            self.errors[endpoint] += 1
            self.first_error = self.first_error or f"{endpoint}: {type(exc).__name__}: {exc}"[:300]
            return None
        if record:
            self.latencies[endpoint].append((time.perf_counter() - began) * 1000)
        return result

    def turn(self, threads: list[Any], number: int, record: bool) -> None:
        at = number % len(threads)
        thread, memory = threads[at], self.memories[at]
        text = utterance(self.rng)
        ids = [f"c{self.index}-t{number}-u", f"c{self.index}-t{number}-a"]
        batch = [
            {"role": "user", "content": text, "id": ids[0]},
            {"role": "assistant", "content": "noted: " + utterance(self.rng, 8), "id": ids[1]},
        ]
        if self.timed("add", lambda: thread.add_messages(batch), record) is not None and record:
            self.acked.extend(ids)
        self.timed("card", lambda: thread.get_context_card(max_recent_messages=6, query=text), record)
        self.timed("search", lambda: memory.search(text, thread_id=thread.thread_id, k=5), record)

    def run(self) -> None:
        threads: list[Any] = []
        try:
            user = f"user{self.index}"
            warm = [m.thread(f"{self.thread_id}-warm", user_id=user) for m in self.memories]
            for number in range(max(self.warmup, len(warm))):  # every connection opened before timing
                self.turn(warm, -1 - number, record=False)
            threads = [m.thread(self.thread_id, user_id=user) for m in self.memories]
        except Exception as exc:
            self.errors["open"] += 1
            self.first_error = f"open: {type(exc).__name__}: {exc}"[:300]
        finally:
            self.start_line.wait()
        for number in range(self.turns if threads else 0):
            self.turn(threads, number, record=True)


def check(memory: Memory, client: Client, outcome: Outcome) -> None:
    """Read the client's thread back and compare it with the adds that were acknowledged."""
    if not client.acked:  # the thread may not exist (its opening failed): nothing to compare
        return
    stored = memory.get_thread(client.thread_id).messages()
    ids = [m.id for m in stored]
    counts = Counter(ids)
    acked = set(client.acked)
    outcome.lost += sum(1 for i in client.acked if counts[i] == 0)
    outcome.duplicated += sum(n - 1 for n in counts.values() if n > 1)
    outcome.unacknowledged += sum(1 for i in counts if i not in acked)
    seqs = [m.seq for m in stored]
    in_order = [i for i in dict.fromkeys(ids) if i in acked]
    outcome.disordered += sum(1 for a, b in zip(in_order, client.acked, strict=False) if a != b)
    outcome.disordered += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)


def measure(
    name: str,
    memory_for: Callable[[int], Memory],
    args: argparse.Namespace,
    server: Server | None = None,
    database: str | None = None,
) -> Outcome:
    outcome = Outcome(name, args.clients)
    run = "bench-" + uuid.uuid4().hex[:8]
    start = threading.Barrier(args.clients + 1)
    per = args.connections if server is not None else 1
    memories = [[memory_for(i) for _ in range(per)] for i in range(args.clients)]
    clients = [Client(i, memories[i], run, (args.warmup, args.turns), start) for i in range(args.clients)]
    for c in clients:
        c.start()
    start.wait()  # every client warmed up
    processes = server_pids(server) + backend_pids(args.pg_url, database)
    cpu_before, processes_before, began = cpu_self(), cpu_of(processes), time.perf_counter()
    spread = connections_per_worker(server)
    for c in clients:
        c.join()
    outcome.seconds = time.perf_counter() - began
    outcome.cpu_client, outcome.spread = cpu_self() - cpu_before, spread
    after = cpu_of(server_pids(server) + backend_pids(args.pg_url, database))
    server_side = set(server_pids(server))
    if server is not None:
        outcome.cpu_server = used(
            {p: t for p, t in processes_before.items() if p in server_side},
            {p: t for p, t in after.items() if p in server_side},
        )
    if database is not None:
        outcome.cpu_db = used(
            {p: t for p, t in processes_before.items() if p not in server_side},
            {p: t for p, t in after.items() if p not in server_side},
        )
    for c in clients:
        outcome.turns += args.turns
        for e in ENDPOINTS:
            outcome.latencies[e].extend(c.latencies[e])
        outcome.errors.update(c.errors)
        outcome.first_error = outcome.first_error or c.first_error
        check(memories[c.index][0], c, outcome)
    if server is not None:
        for mine in memories:
            for m in mine:
                m.close()
    print(f"  {name}: {outcome.turns / outcome.seconds:,.1f} turns/s", flush=True)
    return outcome


# ----------------------------------------------------------------------------- the setups


def api_key(url: str) -> str:
    from remem.server.keys import create_key
    from remem.store import open_store

    with open_store(url) as store:
        secret, _ = create_key(store, tenant="bench", name="bench/service.py")
    return secret


def in_process(name: str, url: str, args: argparse.Namespace, database: str | None = None) -> Outcome:
    with Memory.from_url(url, embedder="fake") as memory:
        return measure(name, lambda _: memory, args, database=database)


def served(
    name: str, url: str, args: argparse.Namespace, workers: int = 1, database: str | None = None
) -> Outcome:
    key = api_key(url)
    server = start_server(url, ["--workers", str(workers), "--rate-limit", "0"]).ready()
    try:
        return measure(
            name, lambda _: Memory.from_url(server.url, api_key=key), args, server=server, database=database
        )
    finally:
        server.stop()
        shutil.rmtree(server.log.parent, ignore_errors=True)


@contextlib.contextmanager
def postgres(admin_url: str) -> Iterator[tuple[str, str]]:
    with fresh_database(admin_url) as url:
        yield url, url.partition("?")[0].rsplit("/", 1)[1]


def run_all(args: argparse.Namespace) -> list[Outcome]:
    outcomes = []
    folder = Path(tempfile.mkdtemp(prefix="remem-bench-service-"))
    try:
        outcomes.append(in_process("library in-process, SQLite", f"sqlite:///{folder / 'local.db'}", args))
        outcomes.append(served("remem serve, SQLite, 1 process", f"sqlite:///{folder / 'served.db'}", args))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.only_sqlite:
        return outcomes
    with postgres(args.pg_url) as (url, name):
        outcomes.append(in_process("library in-process, PostgreSQL", url, args, database=name))
    for workers in args.workers:
        with postgres(args.pg_url) as (url, name):
            label = f"remem serve, PostgreSQL, {workers} worker{'s' if workers > 1 else ''}"
            outcomes.append(served(label, url, args, workers=workers, database=name))
    return outcomes


# ----------------------------------------------------------------------------- the report


def percentiles(samples: list[float]) -> tuple[float, float, float] | None:
    if not samples:
        return None
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return at(0.50), at(0.95), at(0.99)


def p50(outcome: Outcome, endpoint: str) -> float:
    found = percentiles(outcome.latencies[endpoint])
    return found[0] if found else float("nan")


def cell(samples: list[float]) -> str:
    found = percentiles(samples)
    return "-" if found is None else " / ".join(f"{v:.1f}" for v in found)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    print(
        f"\n### {args.clients} clients x {args.turns} turns (add 2 messages + card + search per turn), "
        f"{args.connections} connection(s) per HTTP client\n"
    )
    print(
        "| setup | turns/s | add p50/p95/p99 ms | card p50/p95/p99 ms | search p50/p95/p99 ms | errors "
        "| lost / dup / out of order | CPU s client / server / db | CPU ms a turn client / server / db "
        "| cores busy |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for o in outcomes:
        failed = sum(o.errors.values())
        per_turn = " / ".join(
            "-" if v is None else f"{1000 * v / max(1, o.turns):.1f}"
            for v in (o.cpu_client, o.cpu_server, o.cpu_db)
        )
        busy = (o.cpu_client + (o.cpu_server or 0.0) + (o.cpu_db or 0.0)) / o.seconds
        print(
            f"| {o.name} | {o.turns / o.seconds:,.1f} | {cell(o.latencies['add'])} | {cell(o.latencies['card'])} "
            f"| {cell(o.latencies['search'])} | {failed} ({100 * failed / max(1, o.calls()):.1f}%) "
            f"| {o.lost} / {o.duplicated} / {o.disordered} "
            f"| {o.cpu_client:.1f} / {seconds(o.cpu_server)} / {seconds(o.cpu_db)} | {per_turn} | {busy:.2f} |"
        )
    print(
        "\nCPU: this process (the clients; in-process, the library too), the `remem serve` process tree, "
        "PostgreSQL's backends of the run's database. Cores busy: their CPU seconds over the run's seconds "
        f"(the machine has {os.cpu_count()}; other load on it is not counted)."
    )
    for o in outcomes:
        if o.spread and "workers" in o.name:
            print(f"\n{o.name}: the {o.clients} clients' connections fell {o.spread} on the workers")
        if o.first_error:
            print(f"\n{o.name}: first error: {o.first_error}")
        if o.unacknowledged:
            print(f"\n{o.name}: {o.unacknowledged} messages stored whose add was not acknowledged (an error)")
    by_name = {o.name: o for o in outcomes}
    print("\n### Targets\n")
    pairs = [
        ("remem serve, SQLite, 1 process", "library in-process, SQLite"),
        ("remem serve, PostgreSQL, 1 worker", "library in-process, PostgreSQL"),
    ]
    for served_name, local_name in pairs:
        if served_name in by_name and local_name in by_name:
            for endpoint in ("add", "card"):
                extra = p50(by_name[served_name], endpoint) - p50(by_name[local_name], endpoint)
                verdict = "met" if extra <= 3.0 else "NOT met"
                print(
                    f"- {served_name}: HTTP adds {extra:+.1f} ms p50 to {endpoint} (target <= 3 ms): {verdict}"
                )
    one, two = (by_name.get(f"remem serve, PostgreSQL, {w}") for w in ("1 worker", "2 workers"))
    if one and two:
        ratio = (two.turns / two.seconds) / (one.turns / one.seconds)
        verdict = "met" if ratio >= 1.6 else "NOT met"
        sides = "; ".join(
            f"{o.name.rsplit(', ', 1)[1]}: {o.cpu_client:.1f} / {seconds(o.cpu_server)} / {seconds(o.cpu_db)}"
            for o in (one, two)
        )
        print(
            f"- 2 workers on PostgreSQL: {ratio:.2f}x the throughput of 1 (target >= 1.6x): {verdict} "
            f"(CPU s client / server / db, {sides}; connections per worker: {two.spread or '-'})"
        )
    wrong = sum(o.lost + o.duplicated + o.disordered for o in outcomes)
    print(
        f"- messages lost, duplicated or out of order: {wrong} (target 0): {'met' if wrong == 0 else 'NOT met'}"
    )
    print(
        f"\ncores: {os.cpu_count()}, load average (1 min) at the start: {args.load_at_start:.2f}, "
        f"before the report: {os.getloadavg()[0]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (threads)")
    parser.add_argument("--turns", type=int, default=20, help="measured turns per client")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured turns per client first")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts on PostgreSQL")
    parser.add_argument(
        "--connections",
        type=int,
        default=4,
        help="connections per HTTP client, used in turn (the kernel spreads connections over workers)",
    )
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--only-sqlite", action="store_true", help="skip every PostgreSQL setup")
    parser.add_argument("--json", help="also write the raw results to this file")
    args = parser.parse_args()
    if args.clients < 1 or args.turns < 1 or args.connections < 1:
        parser.error("--clients, --turns and --connections take at least 1")
    args.load_at_start = os.getloadavg()[0]
    print(f"{args.clients} clients x {args.turns} turns ...", flush=True)
    outcomes = run_all(args)
    report(outcomes, args)
    if args.json:
        rows = [{**o.__dict__, "errors": dict(o.errors)} for o in outcomes]
        Path(args.json).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
