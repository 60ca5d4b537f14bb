"""Benchmark: ``remem serve`` under concurrent clients, next to the library called in-process (the floor).

N clients x M turns. Each client keeps a thread of its own, and each turn is

- add: the user's message and the assistant's reply (ids given, so a retry would store nothing twice);
- card: the thread's context card for the user's message (``query``, 6 recent messages);
- search: hybrid search of the thread for the user's message (``k=5``).

One run measures, in order: the library in-process on SQLite; ``remem serve`` (one process) on the same kind
of SQLite file; the library in-process on PostgreSQL; ``remem serve`` on PostgreSQL with 1 and 2 workers
(``--workers 1 2 4`` for more). Each setup gets a fresh SQLite file or a fresh PostgreSQL database (dropped
after), the server a tenant key (``X-Api-Key``, rate limit off). An HTTP client is a process of its own (spawned:
its own interpreter, GIL and connections, so the clients' CPU does not queue on one GIL, as it did when they
were threads of this process) holding ``Memory.from_url("http://...", api_key=...)``, ``--connections`` of
them (4), used in turn one turn at a time; the in-process clients are threads of this process sharing one
``Memory`` (the floor: no transport, no serialisation). Every client first plays unmeasured turns
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

With more than one client, the library and one server process (SQLite; PostgreSQL, 1 worker) are also
measured with 1 client, as extra rows (``, 1 client``; ``--no-single``: not): what the transport costs a
request with nothing queued, next to the targets' numbers, which are the N clients'.

Prints one Markdown table (turns per second, p50 / p95 / p99 per endpoint in ms, error rate, messages lost /
duplicated / out of order, CPU seconds used during the measured turns, in all and per turn: the clients (each
client process's own; in-process, this process, the library included), the ``remem serve`` process tree, and
PostgreSQL's backends serving the run's database; how many cores those kept busy, and the throughput all
cores would give at that CPU a turn), what PostgreSQL's backends were doing (sampled every 20 ms: running,
waiting for a lock, idle in a transaction), then the issue's targets, each met or not. Embeddings come from the fake embedder on both sides
(``REMEM_EMBEDDER=fake``), so the numbers are remem's and the transport's, not a model's. Everything runs on
loopback; the client, the server and the database share the machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
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
    workers: int = 0  # server processes (0: the library in this process)
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
    wait_client: float = 0.0  # seconds runnable but waiting for a CPU, each side
    wait_server: float | None = None
    wait_db: float | None = None
    db_activity: str = ""  # PostgreSQL's backends: mean active, waiting for a lock, idle in a transaction

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


def waited(pids: list[int]) -> dict[int, float]:
    """Seconds each process's threads have spent runnable but waiting for a CPU (``/proc/PID/task/*/
    schedstat``, second field, ns): how much the machine's cores, shared with whatever else runs on it,
    held the process back."""
    found = {}
    for pid in pids:
        total = 0
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    total += int((task / "schedstat").read_text().split()[1])
            found[pid] = total / 1e9
    return found


def thread_wait() -> float:
    """:func:`waited` of the calling thread."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    return 0.0


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


@dataclass
class Played:
    """What one client did in its measured turns (sent back from a client process)."""

    index: int
    thread_id: str
    acked: list[str] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: {e: [] for e in ENDPOINTS})
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""
    cpu: float = 0.0  # this client's CPU seconds in its measured turns (a client process's own)
    wait: float = 0.0  # and the seconds it waited for a CPU meanwhile


class Player:
    """One client's turns, each turn's three calls on one of ``memories`` in turn (one connection each
    over HTTP, so that several workers share a client's load)."""

    def __init__(self, index: int, memories: list[Memory], run: str, turns: tuple[int, int]) -> None:
        self.memories = memories
        self.warmup, self.turns = turns
        self.played = Played(index, f"{run}-c{index}")
        self.rng = random.Random(index)
        self.threads: list[Any] = []

    def timed(self, endpoint: str, call: Callable[[], Any], record: bool) -> Any:
        began = time.perf_counter()
        try:
            result = call()
        except Exception as exc:  # counted and reported, the run goes on
            self.played.errors[endpoint] += 1
            error = f"{endpoint}: {type(exc).__name__}: {exc}"[:300]
            self.played.first_error = self.played.first_error or error
            return None
        if record:
            self.played.latencies[endpoint].append((time.perf_counter() - began) * 1000)
        return result

    def turn(self, threads: list[Any], number: int, record: bool) -> None:
        at = number % len(threads)
        thread, memory = threads[at], self.memories[at]
        text = utterance(self.rng)
        index = self.played.index
        ids = [f"c{index}-t{number}-u", f"c{index}-t{number}-a"]
        batch = [
            {"role": "user", "content": text, "id": ids[0]},
            {"role": "assistant", "content": "noted: " + utterance(self.rng, 8), "id": ids[1]},
        ]
        if self.timed("add", lambda: thread.add_messages(batch), record) is not None and record:
            self.played.acked.extend(ids)
        self.timed("card", lambda: thread.get_context_card(max_recent_messages=6, query=text), record)
        self.timed("search", lambda: memory.search(text, thread_id=thread.thread_id, k=5), record)

    def warm(self) -> None:
        """Unmeasured turns on a thread of its own, every connection opened, then the measured thread."""
        try:
            user = f"user{self.played.index}"
            warm = [m.thread(f"{self.played.thread_id}-warm", user_id=user) for m in self.memories]
            for number in range(max(self.warmup, len(warm))):
                self.turn(warm, -1 - number, record=False)
            self.threads = [m.thread(self.played.thread_id, user_id=user) for m in self.memories]
        except Exception as exc:
            self.played.errors["open"] += 1
            self.played.first_error = f"open: {type(exc).__name__}: {exc}"[:300]

    def play(self) -> Played:
        for number in range(self.turns if self.threads else 0):
            self.turn(self.threads, number, record=True)
        return self.played


BARRIER_TIMEOUT = 600.0  # a client process importing remem on a busy 2-core machine, then warming up


def client_process(
    index: int,
    url: str,
    key: str,
    connections: int,
    run: str,
    turns: tuple[int, int],
    start: Any,
    results: Any,
) -> None:
    """One HTTP client in a process of its own (its own interpreter, GIL and connections): warm up, wait
    for every other client, play the measured turns, send back what it did and the CPU it used."""
    memories = [Memory.from_url(url, api_key=key) for _ in range(connections)]
    player = Player(index, memories, run, turns)
    player.warm()
    start.wait(BARRIER_TIMEOUT)
    before, wait_before = cpu_self(), sum(waited([os.getpid()]).values())
    played = player.play()
    played.cpu, played.wait = cpu_self() - before, sum(waited([os.getpid()]).values()) - wait_before
    results.put(played)
    for m in memories:
        m.close()


def check(memory: Memory, played: Played, outcome: Outcome) -> None:
    """Read the client's thread back and compare it with the adds that were acknowledged."""
    if not played.acked:  # the thread may not exist (its opening failed): nothing to compare
        return
    stored = memory.get_thread(played.thread_id).messages()
    ids = [m.id for m in stored]
    counts = Counter(ids)
    acked = set(played.acked)
    outcome.lost += sum(1 for i in played.acked if counts[i] == 0)
    outcome.duplicated += sum(n - 1 for n in counts.values() if n > 1)
    outcome.unacknowledged += sum(1 for i in counts if i not in acked)
    seqs = [m.seq for m in stored]
    in_order = [i for i in dict.fromkeys(ids) if i in acked]
    outcome.disordered += sum(1 for a, b in zip(in_order, played.acked, strict=False) if a != b)
    outcome.disordered += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)


class Sampler(threading.Thread):
    """Reads what PostgreSQL's backends of the run's database are doing every 20 ms during the measured
    turns: how many run a statement, wait for a lock (an advisory lock is a thread's lease), sit idle in a
    transaction. Their means say whether the database is the bottleneck."""

    def __init__(self, admin_url: str, database: str) -> None:
        super().__init__(daemon=True)
        self.admin_url, self.database = admin_url, database
        self.samples = 0
        self.totals: Counter[str] = Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        query = (
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self.stop.wait(0.02):
                self.samples += 1
                for state, wait_type, wait in conn.execute(query, (self.database,)).fetchall():
                    if state == "active":
                        self.totals["active"] += 1
                        if wait_type == "Lock":
                            self.totals[f"lock:{wait}"] += 1
                        elif wait_type in ("IO", "LWLock"):
                            self.totals[wait_type] += 1
                    elif state == "idle in transaction":
                        self.totals["idle in transaction"] += 1

    def summary(self) -> str:
        if not self.samples:
            return ""
        return (
            ", ".join(f"{name} {n / self.samples:.2f}" for name, n in sorted(self.totals.items())) or "idle"
        )


def measure(
    name: str,
    args: argparse.Namespace,
    memory: Memory | None = None,
    server: tuple[Server, str] | None = None,
    database: str | None = None,
    workers: int = 1,
) -> Outcome:
    """The library's clients are threads of this process sharing ``memory`` (the floor: no transport);
    the server's are processes of their own (``server``: the server and a tenant key)."""
    outcome = Outcome(name, args.clients, workers=0 if server is None else workers)
    run = "bench-" + uuid.uuid4().hex[:8]
    turns = (args.warmup, args.turns)
    played: list[Played] = []
    if server is None:
        assert memory is not None
        start: Any = threading.Barrier(args.clients + 1)
        players = [Player(i, [memory], run, turns) for i in range(args.clients)]

        def in_thread(player: Player) -> None:
            player.warm()
            start.wait()
            wait_before = thread_wait()
            played.append(player.play())
            played[-1].wait = thread_wait() - wait_before

        workers = [threading.Thread(target=in_thread, args=(p,), daemon=True) for p in players]
    else:
        context = multiprocessing.get_context("spawn")  # no copied locks, pools or threads
        start, results = context.Barrier(args.clients + 1), context.Queue()
        workers = [
            context.Process(
                target=client_process,
                args=(i, server[0].url, server[1], args.connections, run, turns, start, results),
                daemon=True,
            )
            for i in range(args.clients)
        ]
    for w in workers:
        w.start()
    start.wait(BARRIER_TIMEOUT)  # every client warmed up
    processes = server_pids(server[0] if server else None) + backend_pids(args.pg_url, database)
    sampler = Sampler(args.pg_url, database) if database is not None else None
    waits_before = waited(processes)
    cpu_before, processes_before, began = cpu_self(), cpu_of(processes), time.perf_counter()
    if sampler is not None:
        sampler.start()
    if server is None:
        for w in workers:
            w.join()
    else:
        outcome.spread = connections_per_worker(server[0])
        played = [results.get(timeout=BARRIER_TIMEOUT) for _ in workers]  # sent as each ends its turns
    outcome.seconds = time.perf_counter() - began  # not the client processes' exits
    processes = server_pids(server[0] if server else None) + backend_pids(args.pg_url, database)
    after, waits_after = cpu_of(processes), waited(processes)
    for w in workers:
        w.join()
    if sampler is not None:
        sampler.stop.set()
        sampler.join()
        outcome.db_activity = sampler.summary()
    outcome.cpu_client = cpu_self() - cpu_before if server is None else sum(p.cpu for p in played)
    outcome.wait_client = sum(p.wait for p in played)
    server_side = set(server_pids(server[0])) if server is not None else set()

    def side(readings: dict[int, float], of_server: bool) -> dict[int, float]:
        return {p: t for p, t in readings.items() if (p in server_side) == of_server}

    if server is not None:
        outcome.cpu_server = used(side(processes_before, True), side(after, True))
        outcome.wait_server = used(side(waits_before, True), side(waits_after, True))
    if database is not None:
        outcome.cpu_db = used(side(processes_before, False), side(after, False))
        outcome.wait_db = used(side(waits_before, False), side(waits_after, False))
    reader = memory if server is None else Memory.from_url(server[0].url, api_key=server[1])
    try:
        for p in sorted(played, key=lambda p: p.index):
            outcome.turns += args.turns
            for e in ENDPOINTS:
                outcome.latencies[e].extend(p.latencies[e])
            outcome.errors.update(p.errors)
            outcome.first_error = outcome.first_error or p.first_error
            check(reader, p, outcome)
    finally:
        if reader is not memory:
            reader.close()
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
        return measure(name, args, memory=memory, database=database)


def served(
    name: str, url: str, args: argparse.Namespace, workers: int = 1, database: str | None = None
) -> Outcome:
    key = api_key(url)
    server = start_server(url, ["--workers", str(workers), "--rate-limit", "0"]).ready()
    try:
        return measure(name, args, server=(server, key), database=database, workers=workers)
    finally:
        server.stop()
        shutil.rmtree(server.log.parent, ignore_errors=True)


@contextlib.contextmanager
def postgres(admin_url: str) -> Iterator[tuple[str, str]]:
    with fresh_database(admin_url) as url:
        yield url, url.partition("?")[0].rsplit("/", 1)[1]


ONE_CLIENT = ", 1 client"  # the suffix of the extra rows with one client (no queueing)


def run_all(args: argparse.Namespace) -> list[Outcome]:
    outcomes = []
    alone = argparse.Namespace(**{**vars(args), "clients": 1})
    extra = args.clients > 1 and not args.no_single  # one client too: the transport's own cost a request
    folder = Path(tempfile.mkdtemp(prefix="remem-bench-service-"))
    try:
        outcomes.append(in_process("library in-process, SQLite", f"sqlite:///{folder / 'local.db'}", args))
        outcomes.append(served("remem serve, SQLite, 1 process", f"sqlite:///{folder / 'served.db'}", args))
        if extra:
            name = "library in-process, SQLite" + ONE_CLIENT
            outcomes.append(in_process(name, f"sqlite:///{folder / 'local1.db'}", alone))
            name = "remem serve, SQLite, 1 process" + ONE_CLIENT
            outcomes.append(served(name, f"sqlite:///{folder / 'served1.db'}", alone))
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
    if extra:
        with postgres(args.pg_url) as (url, name):
            label = "library in-process, PostgreSQL" + ONE_CLIENT
            outcomes.append(in_process(label, url, alone, database=name))
        with postgres(args.pg_url) as (url, name):
            label = "remem serve, PostgreSQL, 1 worker" + ONE_CLIENT
            outcomes.append(served(label, url, alone, workers=1, database=name))
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


def total_cpu(o: Outcome) -> float:
    return o.cpu_client + (o.cpu_server or 0.0) + (o.cpu_db or 0.0)


def ceiling(o: Outcome) -> float:
    """The most turns a second this machine could give at the row's CPU a turn: every core busy, and no
    Python process past one core (its GIL): a server worker's Python (``workers`` of them), or in-process
    this process's, library and clients together. The database's backends and the client processes,
    many, have no bound of their own."""
    cores = (os.cpu_count() or 1) / max(1e-9, total_cpu(o))
    gil_bound = o.cpu_server if o.workers else o.cpu_client
    per_process = max(1, o.workers) / max(1e-9, gil_bound or 0.0)
    return o.turns * min(cores, per_process)


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    print(
        f"\n### {args.clients} clients x {args.turns} turns (add 2 messages + card + search per turn), "
        f"{args.connections} connection(s) per HTTP client\n"
    )
    print(
        "| setup | turns/s | add p50/p95/p99 ms | card p50/p95/p99 ms | search p50/p95/p99 ms | errors "
        "| lost / dup / out of order | CPU s client / server / db | CPU ms a turn client / server / db "
        "| cores busy | ceiling turns/s | waiting for a CPU s client / server / db |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for o in outcomes:
        failed = sum(o.errors.values())
        per_turn = " / ".join(
            "-" if v is None else f"{1000 * v / max(1, o.turns):.1f}"
            for v in (o.cpu_client, o.cpu_server, o.cpu_db)
        )
        busy = total_cpu(o) / o.seconds
        print(
            f"| {o.name} | {o.turns / o.seconds:,.1f} | {cell(o.latencies['add'])} | {cell(o.latencies['card'])} "
            f"| {cell(o.latencies['search'])} | {failed} ({100 * failed / max(1, o.calls()):.1f}%) "
            f"| {o.lost} / {o.duplicated} / {o.disordered} "
            f"| {o.cpu_client:.1f} / {seconds(o.cpu_server)} / {seconds(o.cpu_db)} | {per_turn} | {busy:.2f} "
            f"| {ceiling(o):,.1f} | {o.wait_client:.1f} / {seconds(o.wait_server)} / {seconds(o.wait_db)} |"
        )
    print(
        "\nCPU: this process (the clients; in-process, the library too), the `remem serve` process tree, "
        "PostgreSQL's backends of the run's database. Cores busy: their CPU seconds over the run's seconds "
        f"(the machine has {os.cpu_count()}; other load on it is not counted). Ceiling: the turns a second "
        f"all {os.cpu_count()} cores would give at the row's CPU a turn (client + server + db), were nothing "
        "else running and nothing waiting, with no Python process past one core (its GIL: a server worker; "
        "in-process, this process). Waiting for a CPU: seconds the side's threads were runnable "
        "but not running (`/proc/PID/task/*/schedstat`): the cores, shared with the machine's other load, "
        "holding the run back."
    )
    for o in outcomes:
        if o.spread and "workers" in o.name:
            print(f"\n{o.name}: the {o.clients} clients' connections fell {o.spread} on the workers")
        if o.db_activity:
            print(
                f"\n{o.name}: PostgreSQL backends of the run, mean over the measured turns: {o.db_activity}"
            )
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
    for served_name, local_name in pairs:  # not the target's numbers: the same with nothing queued
        one_served, one_local = by_name.get(served_name + ONE_CLIENT), by_name.get(local_name + ONE_CLIENT)
        if one_served and one_local:
            extras = ", ".join(
                f"{endpoint} {p50(one_served, endpoint) - p50(one_local, endpoint):+.1f}"
                for endpoint in ENDPOINTS
            )
            print(f"  - with 1 client (no queueing), {served_name} minus the library, ms p50: {extras}")
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
        per_turn = {
            o.workers: (1000 * (o.cpu_server or 0.0) / o.turns, 1000 * total_cpu(o) / o.turns)
            for o in (one, two)
        }
        print(
            f"  - the CPU bound on {os.cpu_count()} cores: a turn costs the server {per_turn[1][0]:.1f} ms of CPU "
            f"and all sides {per_turn[1][1]:.1f} with 1 worker ({per_turn[2][0]:.1f} and {per_turn[2][1]:.1f} with 2), "
            f"so 1 worker can give at most {ceiling(one):.1f} turns/s (its one GIL or the cores, the smaller) "
            f"and 2 at most {ceiling(two):.1f} (the cores): {ceiling(two) / ceiling(one):.2f}x. Measured "
            f"{ratio:.2f}x, with 1 worker keeping {total_cpu(one) / one.seconds:.2f} cores busy and 2 workers "
            f"{total_cpu(two) / two.seconds:.2f}"
        )
        for o in (one, two):
            held = o.wait_client + (o.wait_server or 0.0) + (o.wait_db or 0.0)
            print(
                f"  - {o.name.rsplit(', ', 1)[1]}: {total_cpu(o):.1f} s on a CPU, {held:.1f} s runnable but "
                f"waiting for one, over {o.seconds:.1f} s; PostgreSQL's backends: {o.db_activity or '-'}"
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
    parser.add_argument(
        "--clients", type=int, default=4, help="concurrent clients (processes; threads for the library)"
    )
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
    parser.add_argument(
        "--no-single", action="store_true", help="no extra rows with 1 client (library and 1 server process)"
    )
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
