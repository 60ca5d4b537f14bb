"""Usage benchmark, agent path: what the ledger and the budget checks add to each turn of ``build_agent``.

    python bench/usage_agent.py [--turns 1000] [--backends sqlite,postgres] [--pg-url URL]

One run, per backend (SQLite file, PostgreSQL database): two agents from ``build_agent`` on remem's
checkpointer in the same database, played turn for turn, interleaved: ``plain`` (``ledger=False``, no
budget) and ``ledger`` (every budget scope set high enough never to trip, prices, and the ledger in the
checkpointer's database, so every call reads the turn's, the thread's and the user's day spending and
writes one row). Both use the summary strategy with the extractive summariser and remem's
ScriptedChatModel (no LLM). The table gives the median ms per turn over the turns ending at 10, 100 and
1,000 (windows of 10, 50, 50), the added share, and the ledger's own time per turn (the budget check:
estimate and ledger reads; and the record: the ledger write), which a busy machine disturbs less than
the difference of two totals. Target: at most 5% added.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remem import ScriptedChatModel, Settings, build_agent, checkpointer_from_url, run_turn
from remem.agent import _TURN_RULES, ledger_of

# One setting, one workload and one database helper for both usage benchmarks (this one and the middleware's).
sys.path.insert(0, str(Path(__file__).parent))
from usage import HIGH, MARKS, WINDOWS, _database, _text, parse_args


class _Own:
    """Adds up the time spent in the agent's ledger and budget steps (wrapped on the graph's nodes)."""

    def __init__(self, graph: Any) -> None:
        self.ms = 0.0
        nodes = _TURN_RULES[graph].nodes
        assert nodes is not None
        for name in ("check_budgets", "_record", "adopt_legacy"):
            setattr(nodes, name, self._timed(getattr(nodes, name)))

    def _timed(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return step(*args, **kwargs)
            finally:
                self.ms += (time.perf_counter() - started) * 1000

        return timed


def _run(kind: str, url: str, turns: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"plain": [], "ledger": [], "own": []}
    model = ScriptedChatModel(default=lambda msgs: "Noted: " + _text(len(msgs), 60))
    settings = Settings(prices=(("scripted", 0.15, 0.6, 0.075),))
    with checkpointer_from_url(url) as saver:
        agents = {
            "plain": build_agent(
                model, checkpointer=saver, summarizer="extractive", settings=settings, ledger=False
            ),
            "ledger": build_agent(
                model, checkpointer=saver, summarizer="extractive", settings=settings, budgets=HIGH
            ),
        }
        own = _Own(agents["ledger"])
        for i in range(turns):
            for name, agent in agents.items():
                started = time.perf_counter()
                run_turn(agent, f"{name}-{kind}", _text(i, 40), user_id="maya")
                times[name].append((time.perf_counter() - started) * 1000)
            times["own"].append(own.ms)
            own.ms = 0.0
            if (i + 1) % 100 == 0:
                print(f"  {kind}: {i + 1} turns", file=sys.stderr)
        ledger = ledger_of(agents["ledger"])
        assert ledger is not None and ledger.spent(thread_id=f"ledger-{kind}").calls == turns
    return times


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    marks = [m for m in MARKS if m <= args.turns]
    rows = []
    for kind in args.backends.split(","):
        with _database(kind, args.pg_url) as url:
            times = _run(kind, url, args.turns)
        for mark in marks:
            window = min(WINDOWS.get(mark, 10), mark)
            plain = statistics.median(times["plain"][mark - window : mark])
            ledger = statistics.median(times["ledger"][mark - window : mark])
            own = statistics.median(times["own"][mark - window : mark])
            rows.append((kind, mark, plain, ledger, (ledger - plain) / plain * 100, own, own / plain * 100))
    print(
        "\nms per turn, median of the turns ending at each mark (build_agent + run_turn, ScriptedChatModel)\n"
    )
    print("| backend | turns | no ledger | ledger + budgets | added | ledger's own | own / no ledger |")
    print("|---|---|---|---|---|---|---|")
    for kind, mark, plain, ledger, added, own, share in rows:
        print(
            f"| {kind} | {mark:,} | {plain:.2f} | {ledger:.2f} | {added:+.1f}% | {own:.2f} | {share:.1f}% |"
        )


if __name__ == "__main__":
    main()
