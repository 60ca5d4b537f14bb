"""Usage benchmark: what the ledger and the budget checks add to each turn of a ``create_agent`` agent.

    python bench/usage.py [--turns 1000] [--backends sqlite,postgres] [--pg-url URL]

One run, per backend (SQLite file, PostgreSQL database): two agents on remem's checkpointer in the same
database, played turn for turn, interleaved (their order alternates every turn): ``stock``
(``create_agent`` with no middleware) and ``budget`` (``BudgetMiddleware`` with every budget scope set high
enough never to trip, prices, and the ledger in that same database, ``ledger_for(saver)``, so every call
reads the turn's, the thread's and the user's day spending and writes one row).
The model is remem's ScriptedChatModel (no LLM). The table gives, over the turns up to 10, 100 and 1,000,
the wall-time medians and one share: the paired CPU difference (the process's CPU time, every thread,
not the database server's) of the two agents' turns, its mean over the mean without (see median_rows),
and the middleware's own CPU time as a cross-check (its wrap_model_call minus the model call inside
it: the estimate, the ledger's read and its write). Target: ledger share at most 5%.
To compare with another version of remem, run this file with that version first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

from remem import ScriptedChatModel, checkpointer_from_url
from remem.messages import approximate_token_count
from remem.middleware import BudgetMiddleware
from remem.usage import Budgets, Price, PriceTable, ledger_for

DEFAULT_PG = os.environ.get("REMEM_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MARKS = (10, 100, 1000)
WINDOWS = {10: 10, 100: 50, 1000: 50}
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]
HIGH = Budgets(
    call_tokens=10**12,
    call_cost=1e12,
    turn_tokens=10**12,
    turn_cost=1e12,
    thread_tokens=10**12,
    thread_cost=1e12,
    user_day_tokens=10**12,
    user_day_cost=1e12,
)


def _text(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n))


@contextmanager
def _database(kind: str, pg_url: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'bench.db'}"
        return
    import psycopg

    name = "remem_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            base, _, query = pg_url.partition("?")
            yield base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class TimedBudget(BudgetMiddleware):
    """BudgetMiddleware that adds up its own CPU time (its hook minus the model call it wraps; the CPU
    time of the thread that runs it, so a wait for the checkpointer's lock or the server is not counted)."""

    own = 0.0

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        inner = 0.0

        def timed(req: Any) -> Any:
            nonlocal inner
            started = time.thread_time()
            try:
                return handler(req)
            finally:
                inner += time.thread_time() - started

        started = time.thread_time()
        try:
            return super().wrap_model_call(request, timed)
        finally:
            self.own += (time.thread_time() - started - inner) * 1000


def play(agents: dict[str, Any], turn: int, play_one: Any, times: dict[str, list[float]]) -> None:
    """One turn of every agent, in an order that alternates every turn; wall and CPU ms of each."""
    order = list(agents) if turn % 2 == 0 else list(reversed(agents))
    for name in order:
        started, cpu = time.perf_counter(), time.process_time()
        play_one(name, agents[name])
        times[name].append((time.perf_counter() - started) * 1000)
        times[name + "_cpu"].append((time.process_time() - cpu) * 1000)


def _run(kind: str, url: str, turns: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in ("stock", "stock_cpu", "budget", "budget_cpu", "own")}
    model = ScriptedChatModel(default=lambda msgs: "Noted: " + _text(len(msgs), 60))
    prices = PriceTable({"scripted": Price(0.15, 0.6, 0.075)})
    with checkpointer_from_url(url) as saver:
        ledger = ledger_for(saver)
        timed = TimedBudget(ledger, budgets=HIGH, prices=prices)
        agents: dict[str, Any] = {
            "stock": create_agent(model=model, tools=[], checkpointer=saver),
            "budget": create_agent(model=model, tools=[], checkpointer=saver, middleware=[timed]),
        }
        for i in range(turns):
            text = _text(i, 40)

            def one(name: str, agent: Any, text: str = text) -> None:
                config = {"configurable": {"thread_id": f"{name}-{kind}", "user_id": "maya"}}
                agent.invoke({"messages": [HumanMessage(content=text)]}, config)

            play(agents, i, one, times)
            times["own"].append(timed.own)
            timed.own = 0.0
            if (i + 1) % 100 == 0:
                print(f"  {kind}: {i + 1} turns", file=sys.stderr)
        assert ledger.spent(thread_id=f"budget-{kind}").calls == turns
        ledger.close()
    return times


def median_rows(
    kind: str, times: dict[str, list[float]], marks: list[int], names: tuple[str, str]
) -> list[tuple[str, int, dict[str, float]]]:
    """Per mark, over the turns since the previous mark: the wall-time medians of both agents, and the
    ledger's share of the CPU time: per turn, (with ledger - without) CPU ms of the two agents' turns
    played side by side; their mean over the mean CPU ms without, with twice its standard error.

    The mean, not a median: the ledger's rows make the database's rarer work (a WAL checkpoint, a page
    split) come sooner, which a median of turns drops, and a difference of two medians is noisier than
    what it measures (it read +0.5% where the paired mean read +7%). ``own`` (the ledger steps' own CPU
    time) is what its steps cost directly, a cross-check: it misses that later work, and no pairing."""
    base, with_ledger = names
    rows, start = [], 0
    for mark in marks:
        row: dict[str, float] = {}
        for name in (base, with_ledger):
            row[name] = statistics.median(times[name][start:mark])
        without, with_ = times[base + "_cpu"][start:mark], times[with_ledger + "_cpu"][start:mark]
        pairs = [b - a for a, b in zip(without, with_, strict=True)]
        row["base_cpu"] = statistics.fmean(without)
        row["ledger_cpu"] = statistics.fmean(with_)
        row["share"] = statistics.fmean(pairs) / row["base_cpu"]
        se = statistics.stdev(pairs) / len(pairs) ** 0.5 if len(pairs) > 1 else 0.0
        row["share_se2"] = 2 * se / row["base_cpu"]
        row["own"] = statistics.fmean(times["own"][start:mark])
        row["own_share"] = row["own"] / row["base_cpu"]
        rows.append((kind, mark, row))
        print(f"  {kind} @{mark}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), file=sys.stderr)
        start = mark
    return rows


def print_table(title: str, rows: list[tuple[str, int, dict[str, float]]], names: tuple[str, str]) -> None:
    base, with_ledger = names
    print(f"\n{title}\n")
    print(
        f"| backend | turns | {base} ms (wall, median) | {with_ledger} ms | {base} CPU ms (mean) "
        f"| {with_ledger} CPU ms | **ledger share** (paired CPU, mean ± 2 SE) | its steps' own CPU ms (share) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    previous: dict[str, int] = {}
    for kind, mark, m in rows:
        span = f"{previous.get(kind, 0) + 1:,}-{mark:,}"
        previous[kind] = mark
        print(
            f"| {kind} | {span} | {m[base]:.2f} | {m[with_ledger]:.2f} | {m['base_cpu']:.2f} | {m['ledger_cpu']:.2f} "
            f"| **{m['share']:+.1%}** ± {m['share_se2']:.1%} | {m['own']:.3f} ({m['own_share']:.1%}) |"
        )
    print("\nTarget: ledger share at most 5% (of the cheapest turn: the first rows).")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _estimate_times(messages_per_prompt: int, repeats: int = 20) -> tuple[float, float]:
    """ms to count a thread's prompt of ``messages_per_prompt`` messages that grew by one turn since the
    last call: the whole prompt each time (before) and the middleware's prefix reuse (after)."""
    from langchain_core.messages import AIMessage

    try:
        from remem.usage._prefix import PrefixCounter
    except ImportError:  # an older remem, where the middleware kept it
        from remem.middleware.budget import _PrefixCounter as PrefixCounter

    history: list[Any] = []
    for i in range(messages_per_prompt // 2 + repeats + 1):
        history += [
            HumanMessage(content=_text(i, 40), id=f"h{i}"),
            AIMessage(content="Noted: " + _text(i, 60), id=f"a{i}"),
        ]
    prompts = [history[: messages_per_prompt + 2 * r] for r in range(repeats + 1)]
    started = time.perf_counter()
    for prompt in prompts[1:]:
        approximate_token_count(prompt)
    whole = (time.perf_counter() - started) * 1000 / repeats
    counter = PrefixCounter(approximate_token_count)
    counter("t", prompts[0])
    started = time.perf_counter()
    for prompt in prompts[1:]:
        counter("t", prompt)
    reused = (time.perf_counter() - started) * 1000 / repeats
    assert counter("t", prompts[-1]) == approximate_token_count(prompts[-1])
    return whole, reused


def parse_args(description: str) -> argparse.Namespace:
    """The options both usage benchmarks take (this one and bench/usage_agent.py)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=DEFAULT_PG, help="a PostgreSQL URL allowed to create databases")
    return parser.parse_args()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    marks = sorted({*(m for m in MARKS if m <= args.turns), args.turns})
    rows = []
    for kind in args.backends.split(","):
        with _database(kind, args.pg_url) as url:
            times = _run(kind, url, args.turns)
        rows += median_rows(kind, times, marks, ("stock", "budget"))
    print_table(
        "per turn, median of the turns ending at each mark (create_agent, ScriptedChatModel)",
        rows,
        ("stock", "budget"),
    )
    print("\nThe estimate alone: ms to count a prompt one turn longer than the thread's last call\n")
    print("| messages in the prompt | whole prompt | prefix reused |")
    print("|---:|---:|---:|")
    for size in (20, 200, 2000):
        whole, reused = _estimate_times(size)
        print(f"| {size:,} | {whole:.3f} | {reused:.3f} |")


if __name__ == "__main__":
    main()
