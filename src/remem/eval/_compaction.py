"""What each memory strategy sends the model over a long conversation, and which planted facts it keeps.

    report = evaluate_compaction(dataset)                  # the first conversation, every strategy
    print(compaction_markdown(report)); write_compaction_chart(report, Path("compaction.png"))

The user turns of one conversation are replayed through the agent (:func:`remem.build_agent`, the
extractive summariser, a scripted model that answers with the conversation's own replies) once per
strategy, each on its own in-memory checkpointer. At every turn: the tokens of what the model was sent,
and for every planted fact already said (a question's answer, once all its evidence turns are past),
whether the answer is still somewhere in what the model was sent (the kept messages or the summary).
Temporal questions are left out: their answer is a date the turns do not spell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remem.config import STRATEGY_NAMES, Settings, load_settings
from remem.errors import NotFoundError

__all__ = ["CompactionReport", "compaction_markdown", "evaluate_compaction", "write_compaction_chart"]

_DEFAULT_REPLY = "Noted."


@dataclass
class StrategyRun:
    """One strategy over the conversation: per user turn, tokens sent and planted facts in front."""

    strategy: str
    tokens: list[int] = field(default_factory=list)
    facts_said: list[int] = field(default_factory=list)
    facts_in_front: list[int] = field(default_factory=list)

    def share(self, turn: int) -> float | None:
        return self.facts_in_front[turn] / self.facts_said[turn] if self.facts_said[turn] else None

    def as_dict(self) -> dict[str, Any]:
        final = self.share(len(self.tokens) - 1) if self.tokens else None
        said = [s for s in (self.share(n) for n in range(len(self.tokens))) if s is not None]
        return {
            "strategy": self.strategy,
            "turns": len(self.tokens),
            "tokens_total": sum(self.tokens),
            "tokens_mean": sum(self.tokens) / len(self.tokens) if self.tokens else 0.0,
            "tokens_max": max(self.tokens, default=0),
            "tokens_last": self.tokens[-1] if self.tokens else 0,
            "facts_in_front_last": final,
            "facts_in_front_min": min(said, default=None),
            "tokens": self.tokens,
            "facts_said": self.facts_said,
            "facts_in_front": self.facts_in_front,
        }


@dataclass
class CompactionReport:
    conversation: str
    facts: int
    runs: list[StrategyRun]

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversation": self.conversation,
            "facts": self.facts,
            "strategies": [r.as_dict() for r in self.runs],
        }


def _conversation(dataset: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    conversations = dataset.get("conversations") or []
    for conversation in conversations:
        if wanted is None or conversation["id"] == wanted:
            return dict(conversation)
    names = ", ".join(c["id"] for c in conversations[:8]) or "none"
    raise NotFoundError(f"no conversation {wanted!r} in the dataset; it holds {names}")


def _facts(conversation: dict[str, Any]) -> list[tuple[frozenset[str], str]]:
    """(evidence turn ids, answer) of each question whose answer the turns spell."""
    return [
        (frozenset(q.get("evidence") or ()), str(q["answer"]).lower())
        for q in conversation.get("questions", [])
        if q.get("category") != "temporal" and str(q.get("answer", "")).strip() and q.get("evidence")
    ]


def _script(conversation: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(turn id, user text, the reply the conversation gives it) for each user turn, in order."""
    turns = [t for s in conversation.get("sessions", []) for t in s.get("turns", [])]
    script: list[tuple[str, str, str]] = []
    for n, turn in enumerate(turns):
        if turn.get("role") != "user":
            continue
        after = turns[n + 1] if n + 1 < len(turns) else None
        reply = after["content"] if after is not None and after.get("role") == "assistant" else _DEFAULT_REPLY
        script.append((str(turn["id"]), str(turn["content"]), str(reply)))
    return script


def _run(
    strategy: str,
    script: Sequence[tuple[str, str, str]],
    facts: Sequence[tuple[frozenset[str], str]],
    settings: Settings,
) -> StrategyRun:
    from langgraph.checkpoint.memory import InMemorySaver

    from remem.agent import build_agent, run_turn
    from remem.messages import token_counter
    from remem.models import ScriptedChatModel

    model = ScriptedChatModel(replies=[reply for _, _, reply in script], default=_DEFAULT_REPLY)
    agent = build_agent(
        model, strategy=strategy, checkpointer=InMemorySaver(), summarizer="extractive", settings=settings
    )
    count = token_counter(settings.token_counter)
    run = StrategyRun(strategy)
    said: set[str] = set()
    for turn_id, text, _ in script:
        said.add(turn_id)
        run_turn(agent, f"compaction-{strategy}", text)
        sent = model.calls[-1]
        run.tokens.append(count(sent))
        shown = "\n".join(m.text for m in sent).lower()
        due = [answer for evidence, answer in facts if evidence <= said]
        run.facts_said.append(len(due))
        run.facts_in_front.append(sum(1 for answer in due if answer in shown))
    return run


def evaluate_compaction(
    dataset: dict[str, Any],
    *,
    conversation: str | None = None,
    strategies: Sequence[str] = STRATEGY_NAMES,
    settings: Settings | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CompactionReport:
    """Replay one conversation (default: the first) through the agent with each strategy (see the module)."""
    chosen = _conversation(dataset, conversation)
    settings = settings or load_settings()
    script, facts = _script(chosen), _facts(chosen)
    runs: list[StrategyRun] = []
    for n, strategy in enumerate(strategies):
        if progress:
            progress("strategies", n, len(strategies))
        # The turns' own sizes, so that each strategy compacts within this conversation.
        runs.append(_run(strategy, script, facts, settings.replace(strategy=strategy)))
    if progress:
        progress("strategies", len(strategies), len(strategies))
    return CompactionReport(conversation=str(chosen["id"]), facts=len(facts), runs=runs)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def compaction_markdown(report: CompactionReport) -> str:
    """The report as a Markdown table: one row per strategy."""
    lines = [
        f"## Compaction on {report.conversation} ({report.facts} planted facts)",
        "",
        "| strategy | turns | tokens total | mean/turn | max/turn | last turn | facts in front (last) | (worst turn) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report.runs:
        d = run.as_dict()
        lines.append(
            f"| {d['strategy']} | {d['turns']} | {d['tokens_total']} | {d['tokens_mean']:.0f} | {d['tokens_max']} | "
            f"{d['tokens_last']} | {_cell(d['facts_in_front_last'])} | {_cell(d['facts_in_front_min'])} |"
        )
    return "\n".join(lines) + "\n"


def write_compaction_chart(report: CompactionReport, path: Path) -> None:
    """A PNG: tokens sent per turn (top) and the share of planted facts in front of the model (bottom)."""
    from remem.eval._retrieval import pyplot

    plt = pyplot()
    fig, (tokens, facts) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for run in report.runs:
        turns = list(range(1, len(run.tokens) + 1))
        tokens.plot(turns, run.tokens, label=run.strategy)
        shares = [run.share(n) for n in range(len(run.tokens))]
        facts.plot(turns, [float("nan") if s is None else s for s in shares], label=run.strategy)
    tokens.set_ylabel("tokens sent")
    tokens.set_title(f"compaction on {report.conversation}")
    tokens.legend(fontsize="small")
    facts.set_ylabel("planted facts in front")
    facts.set_ylim(0, 1.05)
    facts.set_xlabel("user turn")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
