"""Usage benchmark, agent path: what the ledger and the budget checks add to each turn of ``build_agent``.

    python bench/usage_agent.py [--turns 1000] [--backends sqlite,postgres] [--pg-url URL]

One run, per backend (SQLite file, PostgreSQL database): two agents from ``build_agent``, each on remem's
checkpointer in a database of its own (so that each pays its own database's upkeep: a WAL checkpoint that
the ledger's rows bring sooner is the ledger's cost), played turn for turn, interleaved (their order
alternates every turn):
``plain`` (``ledger=False``, no budget) and ``ledger`` (every budget scope set high enough never to trip,
prices, and the ledger in the checkpointer's database, so every call reads the turn's, the thread's and
the user's day spending, holds its expected spending and writes one row). Both use the summary strategy
with the extractive summariser and remem's ScriptedChatModel (no LLM). The table gives, over the turns up
to 10, 100 and 1,000, the wall-time medians and one share: the mean paired CPU difference over the mean
CPU time without the ledger (bench/usage.py's median_rows says why the mean), with the ledger steps' own
CPU time (budget check, hold, record) as a cross-check. Target: ledger share at most 5%.
To compare with another version of remem, run this file with that version first on ``PYTHONPATH``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remem import ScriptedChatModel, Settings, build_agent, checkpointer_from_url, run_turn
from remem.agent import TURN_RULES_ATTRIBUTE, ledger_of

# One setting, one workload and one database helper for both usage benchmarks (this one and the middleware's).
sys.path.insert(0, str(Path(__file__).parent))
from usage import HIGH, MARKS, _database, _text, median_rows, parse_args, play, print_table


class _Own:
    """Adds up the time spent in the agent's ledger and budget steps (wrapped on the graph's nodes)."""

    def __init__(self, graph: Any) -> None:
        self.ms = 0.0
        self.depth = 0  # shared by the wrappers: a step inside another (precheck's check) is counted once
        nodes = getattr(graph, TURN_RULES_ATTRIBUTE).precheck.__self__  # build_agent's model node
        gate = nodes.gate  # the one gate of every model call (remem.usage._gate)
        # The steps that run_turn's check and call_model take for the ledger and the budgets (the CPU
        # time of the thread that runs them: a wait for the checkpointer's lock or the server is not counted).
        for owner, names in ((nodes, ("adopt_legacy",)), (gate, ("precheck", "before", "after", "flush"))):
            for name in names:
                setattr(owner, name, self._timed(getattr(owner, name)))
        meter = gate.meter  # pricing the reply's event is the ledger's work too
        meter.reply_event = self._timed(meter.reply_event)  # type: ignore[method-assign]

    def _timed(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            started = time.thread_time()
            try:
                return step(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.ms += (time.thread_time() - started) * 1000

        return timed


def _run(kind: str, urls: tuple[str, str], turns: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in ("plain", "plain_cpu", "ledger", "ledger_cpu", "own")}
    model = ScriptedChatModel(default=lambda msgs: "Noted: " + _text(len(msgs), 60))
    settings = Settings(prices=(("scripted", 0.15, 0.6, 0.075),))
    with checkpointer_from_url(urls[0]) as plain_saver, checkpointer_from_url(urls[1]) as saver:
        agents = {
            "plain": build_agent(
                model, checkpointer=plain_saver, summarizer="extractive", settings=settings, ledger=False
            ),
            "ledger": build_agent(
                model, checkpointer=saver, summarizer="extractive", settings=settings, budgets=HIGH
            ),
        }
        own = _Own(agents["ledger"])
        for i in range(turns):
            text = _text(i, 40)

            def one(name: str, agent: Any, text: str = text) -> None:
                run_turn(agent, f"{name}-{kind}", text, user_id="maya")

            play(agents, i, one, times)
            times["own"].append(own.ms)
            own.ms = 0.0
            if (i + 1) % 100 == 0:
                print(f"  {kind}: {i + 1} turns", file=sys.stderr)
        ledger = ledger_of(agents["ledger"])
        assert ledger is not None and ledger.spent(thread_id=f"ledger-{kind}").calls == turns
        ledger.close()
    return times


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    marks = sorted({*(m for m in MARKS if m <= args.turns), args.turns})
    rows = []
    for kind in args.backends.split(","):
        with _database(kind, args.pg_url) as plain_url, _database(kind, args.pg_url) as url:
            times = _run(kind, (plain_url, url), args.turns)
        rows += median_rows(kind, times, marks, ("plain", "ledger"))
    print_table(
        "per turn, median of the turns ending at each mark (build_agent + run_turn, ScriptedChatModel)",
        rows,
        ("plain", "ledger"),
    )


if __name__ == "__main__":
    main()
