"""Usage benchmark: what the ledger and the budget checks add to each turn of a ``create_agent`` agent.

    python bench/usage.py [--turns 1000] [--backends sqlite,postgres] [--pg-url URL]

One run, per backend (SQLite file, PostgreSQL database): two agents on remem's checkpointer in the same
database, played turn for turn, interleaved: ``stock`` (``create_agent`` with no middleware) and
``budget`` (``BudgetMiddleware`` with every budget scope set high enough never to trip, prices, and the
ledger in that same database, so every call reads turn/thread/user-day spending and writes one row).
The model is remem's ScriptedChatModel (no LLM). The table gives the mean ms per turn over the ten turns
ending at 10, 100 and 1,000 turns, and the added share. The target is at most 5% added per turn.
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
from remem.middleware import BudgetMiddleware
from remem.usage import Budgets, Price, PriceTable, open_ledger

DEFAULT_PG = os.environ.get("REMEM_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MARKS = (10, 100, 1000)
WINDOW = 10
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


def _run(kind: str, url: str, turns: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"stock": [], "budget": []}
    model = ScriptedChatModel(default=lambda msgs: "Noted: " + _text(len(msgs), 60))
    prices = PriceTable({"scripted": Price(0.15, 0.6, 0.075)})
    with checkpointer_from_url(url) as saver, open_ledger(url) as ledger:
        agents: dict[str, Any] = {
            "stock": create_agent(model=model, tools=[], checkpointer=saver),
            "budget": create_agent(
                model=model,
                tools=[],
                checkpointer=saver,
                middleware=[BudgetMiddleware(ledger, budgets=HIGH, prices=prices)],
            ),
        }
        for i in range(turns):
            for name, agent in agents.items():
                config = {"configurable": {"thread_id": f"{name}-{kind}", "user_id": "maya"}}
                started = time.perf_counter()
                agent.invoke({"messages": [HumanMessage(content=_text(i, 40))]}, config)
                times[name].append((time.perf_counter() - started) * 1000)
            if (i + 1) % 100 == 0:
                print(f"  {kind}: {i + 1} turns", file=sys.stderr)
        assert ledger.spent(thread_id=f"budget-{kind}").calls == turns
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=DEFAULT_PG, help="a PostgreSQL URL allowed to create databases")
    args = parser.parse_args()
    marks = [m for m in MARKS if m <= args.turns]
    rows = []
    for kind in args.backends.split(","):
        with _database(kind, args.pg_url) as url:
            times = _run(kind, url, args.turns)
        for mark in marks:
            stock = statistics.mean(times["stock"][mark - WINDOW : mark])
            budget = statistics.mean(times["budget"][mark - WINDOW : mark])
            rows.append((kind, mark, stock, budget, (budget - stock) / stock * 100))
    print(
        f"\nms per turn, mean of the {WINDOW} turns ending at each mark (create_agent, ScriptedChatModel)\n"
    )
    print("| backend | turns | stock ms/turn | + BudgetMiddleware & ledger ms/turn | added |")
    print("|---|---|---|---|---|")
    for kind, mark, stock, budget, added in rows:
        print(f"| {kind} | {mark:,} | {stock:.2f} | {budget:.2f} | {added:+.1f}% |")


if __name__ == "__main__":
    main()
