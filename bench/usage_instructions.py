"""Usage benchmark in instructions: what the ledger and the budget checks add to a turn, counted, not timed.

    python bench/usage_instructions.py [--turns 100] [--backends sqlite,postgres] [--paths agent,middleware]

A timed turn on a shared 2-core machine moves by more than the ledger costs; valgrind's callgrind counts
the instructions a process runs, the same from one run to the next. Each (path, backend) is played with
the ledger and budgets and without them: ``agent`` is ``build_agent`` + ``run_turn`` (``ledger=False``
against every budget scope set, prices, the ledger in the checkpointer's database), ``middleware`` is
``create_agent`` alone against ``create_agent`` with ``BudgetMiddleware`` (the same budgets and prices,
``ledger_for(saver)``); remem's ScriptedChatModel, one call per turn. Each is run twice under callgrind,
for 20 turns and for 20 + ``--turns`` turns, each on a fresh database: the difference divided by
``--turns`` is one turn's instructions, start-up and the first turns left out. Only user space is counted
(not the kernel's share of SQLite's locks and writes, nor PostgreSQL's socket calls or its server) and an
instruction is not a second (cache misses are not in it): this is the ledger's added work, not its time,
which bench/usage_agent.py and bench/usage.py measure. Needs valgrind; takes about 10 minutes for all.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from usage import DEFAULT_PG, HIGH, _database, _text

_WARM = 20  # turns of the short run: start-up, imports and the first turns are in both runs


def _play(path: str, variant: str, url: str, turns: int) -> None:
    """Child: ``turns`` turns of one thread (plus 5 before, so that every lazy import is done)."""
    from remem import ScriptedChatModel, Settings, checkpointer_from_url

    model = ScriptedChatModel(default=lambda msgs: "Noted: " + _text(len(msgs), 60))
    with checkpointer_from_url(url) as saver:
        if path == "agent":
            from remem import build_agent, run_turn

            settings = Settings(prices=(("scripted", 0.15, 0.6, 0.075),))
            options: dict[str, Any] = {"budgets": HIGH} if variant == "with" else {"ledger": False}
            agent = build_agent(
                model, checkpointer=saver, summarizer="extractive", settings=settings, **options
            )

            def turn(i: int) -> None:
                run_turn(agent, "t", _text(i, 40), user_id="maya")

        else:
            from langchain.agents import create_agent
            from langchain_core.messages import HumanMessage

            from remem.middleware import BudgetMiddleware
            from remem.usage import Price, PriceTable, ledger_for

            middleware = []
            if variant == "with":
                prices = PriceTable({"scripted": Price(0.15, 0.6, 0.075)})
                middleware = [BudgetMiddleware(ledger_for(saver), budgets=HIGH, prices=prices)]
            graph = create_agent(model=model, tools=[], checkpointer=saver, middleware=middleware)
            config = {"configurable": {"thread_id": "t", "user_id": "maya"}}

            def turn(i: int) -> None:
                graph.invoke({"messages": [HumanMessage(content=_text(i, 40))]}, config)

        for i in range(5 + turns):
            turn(i)


def _instructions(path: str, backend: str, variant: str, turns: int, pg_url: str) -> int:
    with _database(backend, pg_url) as url:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                __file__,
                "--child",
                path,
                variant,
                url,
                str(turns),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--paths", default="agent,middleware")
    parser.add_argument("--pg-url", default=DEFAULT_PG, help="a PostgreSQL URL allowed to create databases")
    parser.add_argument(
        "--child", nargs=4, metavar=("PATH", "VARIANT", "URL", "TURNS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        path, variant, url, turns = args.child
        _play(path, variant, url, int(turns))
        return
    runs = [
        (path, backend, variant, n)
        for path in args.paths.split(",")
        for backend in args.backends.split(",")
        for variant in ("without", "with")
        for n in (_WARM, _WARM + args.turns)
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:  # a run per core
        counts = dict(zip(runs, pool.map(lambda r: _instructions(*r, args.pg_url), runs), strict=True))
    print(
        f"\ninstructions per turn (millions), turns {_WARM + 6} to {_WARM + args.turns + 5} of one thread\n"
    )
    print("| path | backend | without ledger | with ledger and budgets | added |")
    print("|---|---|---:|---:|---:|")
    for path in args.paths.split(","):
        for backend in args.backends.split(","):
            per_turn = {
                variant: (
                    counts[path, backend, variant, _WARM + args.turns] - counts[path, backend, variant, _WARM]
                )
                / args.turns
                / 1e6
                for variant in ("without", "with")
            }
            without, with_ = per_turn["without"], per_turn["with"]
            print(
                f"| {path} | {backend} | {without:.2f} | {with_:.2f} | {(with_ - without) / without:+.1%} |"
            )


if __name__ == "__main__":
    main()
