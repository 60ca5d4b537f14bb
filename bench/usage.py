"""Usage benchmark: what the ledger and the budget checks add to each turn of a ``create_agent`` agent.

    python bench/usage.py [--turns 1000] [--backends sqlite,postgres] [--pg-url URL]

One run, per backend (SQLite file, PostgreSQL database): three agents on remem's checkpointer in the same
database, played turn for turn, interleaved: ``stock`` (``create_agent`` with no middleware), ``budget``
(``BudgetMiddleware`` with every budget scope set high enough never to trip, prices, and the ledger in that
same database, so every call reads turn/thread/user-day spending and writes one row) and ``uncached``
(the same middleware counting the whole prompt at every call, as it did before its per-message count
cache: the "before" of the same run).
The model is remem's ScriptedChatModel (no LLM). The table gives the median ms per turn over the turns
ending at 10, 100 and 1,000 turns (windows of 10, 50, 50), the added share, and the middleware's own time
per turn (its wrap_model_call minus the model call inside it: the estimate, the ledger's reads and its
write), which a busy machine disturbs less than the difference of two totals. Target: at most 5% added.
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
from remem.usage import Budgets, Price, PriceTable, open_ledger

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
    """BudgetMiddleware that adds up its own time (its hook minus the model call it wraps)."""

    own = 0.0

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        inner = 0.0

        def timed(req: Any) -> Any:
            nonlocal inner
            started = time.perf_counter()
            try:
                return handler(req)
            finally:
                inner += time.perf_counter() - started

        started = time.perf_counter()
        try:
            return super().wrap_model_call(request, timed)
        finally:
            self.own += (time.perf_counter() - started - inner) * 1000


def _uncached_count(messages: Any) -> int:
    # Not remem's counter object, so the middleware counts the whole prompt each call (no cache).
    return approximate_token_count(messages)


def _run(kind: str, url: str, turns: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"stock": [], "budget": [], "uncached": [], "own": [], "own_uncached": []}
    model = ScriptedChatModel(default=lambda msgs: "Noted: " + _text(len(msgs), 60))
    prices = PriceTable({"scripted": Price(0.15, 0.6, 0.075)})
    with checkpointer_from_url(url) as saver, open_ledger(url) as ledger:
        timed = TimedBudget(ledger, budgets=HIGH, prices=prices)
        uncached = TimedBudget(ledger, budgets=HIGH, prices=prices, token_counter=_uncached_count)
        agents: dict[str, Any] = {
            "stock": create_agent(model=model, tools=[], checkpointer=saver),
            "budget": create_agent(model=model, tools=[], checkpointer=saver, middleware=[timed]),
            "uncached": create_agent(model=model, tools=[], checkpointer=saver, middleware=[uncached]),
        }
        for i in range(turns):
            for name, agent in agents.items():
                config = {"configurable": {"thread_id": f"{name}-{kind}", "user_id": "maya"}}
                started = time.perf_counter()
                agent.invoke({"messages": [HumanMessage(content=_text(i, 40))]}, config)
                times[name].append((time.perf_counter() - started) * 1000)
            times["own"].append(timed.own)
            times["own_uncached"].append(uncached.own)
            timed.own = uncached.own = 0.0
            if (i + 1) % 100 == 0:
                print(f"  {kind}: {i + 1} turns", file=sys.stderr)
        assert ledger.spent(thread_id=f"budget-{kind}").calls == turns
    return times


def _estimate_times(messages_per_prompt: int, repeats: int = 20) -> tuple[float, float]:
    """ms to count a thread's prompt of ``messages_per_prompt`` messages that grew by one turn since the
    last call: the whole prompt each time (before) and the middleware's prefix reuse (after)."""
    from langchain_core.messages import AIMessage

    from remem.middleware.budget import _PrefixCounter

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
    counter = _PrefixCounter(approximate_token_count)
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
    marks = [m for m in MARKS if m <= args.turns]
    rows = []
    for kind in args.backends.split(","):
        with _database(kind, args.pg_url) as url:
            times = _run(kind, url, args.turns)
        for mark in marks:
            window = min(WINDOWS.get(mark, 10), mark)
            med = {
                name: statistics.median(times[name][mark - window : mark])
                for name in ("stock", "budget", "uncached", "own", "own_uncached")
            }
            rows.append((kind, mark, med))
            print(f"  {kind} @{mark}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()), file=sys.stderr)
    print("\nms per turn, median of the turns ending at each mark (create_agent, ScriptedChatModel)\n")
    print(
        "| backend | turns | stock | + BudgetMiddleware & ledger | added | own | own / stock "
        "| before (no count cache): turn | own | own / stock |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, mark, m in rows:
        stock = m["stock"]
        print(
            f"| {kind} | {mark:,} | {stock:.2f} | {m['budget']:.2f} | {(m['budget'] - stock) / stock:+.1%} "
            f"| {m['own']:.2f} | {m['own'] / stock:.1%} | {m['uncached']:.2f} | {m['own_uncached']:.2f} "
            f"| {m['own_uncached'] / stock:.1%} |"
        )
    print("\nThe estimate alone: ms to count a prompt one turn longer than the thread's last call\n")
    print("| messages in the prompt | whole prompt (before) | prefix reused (after) |")
    print("|---:|---:|---:|")
    for size in (20, 200, 2000):
        whole, reused = _estimate_times(size)
        print(f"| {size:,} | {whole:.3f} | {reused:.3f} |")


if __name__ == "__main__":
    main()
