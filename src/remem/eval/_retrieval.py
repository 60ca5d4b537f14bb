"""Retrieval evaluation: ingest a dataset through the memory client, then ask its questions.

For each question and each search mode (keyword, vector, hybrid) the rank of its evidence is kept: a
question is *found at k* when all its evidence turns are in the top k of its conversation's messages.
For each card budget, whether all its evidence is in the context card built for it (the card's records
and recent messages), and, for a fact that changed, whether the card still holds the superseded turn. Search latency (p50/p95 per mode), the cards' tokens, and what the ledger recorded
(calls, tokens, cost) are reported next to it. :func:`compare` runs two configurations on the same
questions and gives a paired bootstrap confidence interval on each difference.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remem.config import Settings, load_settings
from remem.errors import ConfigError

__all__ = [
    "BUDGETS",
    "KS",
    "MODES",
    "Comparison",
    "RetrievalReport",
    "compare",
    "evaluate_retrieval",
    "markdown",
    "paired_bootstrap",
    "write_chart",
]

KS = (1, 5, 10, 25)
MODES = ("keyword", "vector", "hybrid")
BUDGETS = (250, 500, 1000)

Progress = Callable[[str, int, int], None]
"""Called as ``progress(phase, done, total)`` ("ingest", then "questions")."""


@dataclass
class RetrievalReport:
    """What :func:`evaluate_retrieval` measured. ``questions`` holds one row per question (its category,
    its evidence's rank per mode: None when not in the top 25, and whether each card held it)."""

    name: str
    configuration: str
    ks: tuple[int, ...]
    modes: tuple[str, ...]
    budgets: tuple[int, ...]
    questions: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    card_tokens: dict[int, list[int]] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)
    modes_run: dict[str, str] = field(default_factory=dict)  # asked mode -> the mode the store ran

    def found(self, mode: str, k: int, category: str | None = None) -> list[bool]:
        rows = [q for q in self.questions if category is None or q["category"] == category]
        return [q["ranks"][mode] is not None and q["ranks"][mode] <= k for q in rows]

    def recall(self, mode: str, k: int, category: str | None = None) -> float | None:
        hits = self.found(mode, k, category)
        return sum(hits) / len(hits) if hits else None

    def in_card(self, budget: int, category: str | None = None) -> float | None:
        rows = [
            q["in_card"][str(budget)] for q in self.questions if category is None or q["category"] == category
        ]
        return sum(rows) / len(rows) if rows else None

    def superseded_in_card(self, budget: int) -> float | None:
        """Of the questions with a superseded fact, the share whose card still holds the old turn."""
        rows = [q["superseded_in_card"][str(budget)] for q in self.questions if "superseded_in_card" in q]
        return sum(rows) / len(rows) if rows else None

    def categories(self) -> list[str]:
        return sorted({q["category"] for q in self.questions})

    def as_dict(self) -> dict[str, Any]:
        def pct(values: list[float], q: float) -> float | None:
            if not values:
                return None
            ordered = sorted(values)
            return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

        groups = [None, *self.categories()]
        return {
            "name": self.name,
            "configuration": self.configuration,
            "questions": len(self.questions),
            "modes_run": self.modes_run,
            "recall": {
                mode: {(c or "all"): {f"@{k}": self.recall(mode, k, c) for k in self.ks} for c in groups}
                for mode in self.modes
            },
            "in_card": {(c or "all"): {str(b): self.in_card(b, c) for b in self.budgets} for c in groups},
            "superseded_in_card": {str(b): self.superseded_in_card(b) for b in self.budgets},
            "card_tokens_mean": {
                str(b): (statistics.fmean(v) if v else None) for b, v in self.card_tokens.items()
            },
            "latency_ms": {
                mode: {"p50": pct(v, 0.5), "p95": pct(v, 0.95)} for mode, v in self.latency_ms.items()
            },
            "ledger": self.ledger,
            "per_question": self.questions,
        }


def _settings_for(config: str | Path | None) -> Settings:
    if config is None:
        return load_settings()
    path = Path(config)
    if not path.is_file():
        raise ConfigError(f"there is no configuration file {path}; give a remem.toml to compare")
    return load_settings(config_file=path)


def _rank(keys: list[str], evidence: Sequence[str]) -> int | None:
    """The rank (1-based) at which all of ``evidence`` has been seen in ``keys``; None if it never is."""
    if not evidence:
        return None
    positions = [keys.index(e) + 1 for e in evidence if e in keys]
    return max(positions) if len(positions) == len(evidence) else None


def ingest(memory: Any, conversations: Sequence[dict[str, Any]], progress: Progress | None = None) -> None:
    """Each conversation's turns into the thread ``eval-<id>`` of its user, dated by their sessions, with
    their speakers' names (what the memory client indexes beside the text: ``_records.index_context``)."""
    from remem.eval._dataset import session_date

    for n, conv in enumerate(conversations):
        thread = memory.thread(f"eval-{conv['id']}", user_id=str(conv.get("user_id") or conv["id"]))
        batch = [
            {"id": t["id"], "role": t["role"], "content": t["content"],
             **({"speaker": t["speaker"]} if t.get("speaker") else {}),
             **({"timestamp": f"{day}T12:00:00Z"} if day else {})}
            for s in conv["sessions"]
            for day in [session_date(s.get("date"))]
            for t in s["turns"]
        ]  # fmt: skip
        if batch:
            thread.add_messages(batch)
        if progress:
            progress("ingest", n + 1, len(conversations))


def evaluate_retrieval(
    dataset: dict[str, Any],
    *,
    url: str | None = None,
    config: str | Path | None = None,
    settings: Settings | None = None,
    modes: Sequence[str] = MODES,
    ks: Sequence[int] = KS,
    budgets: Sequence[int] = BUDGETS,
    progress: Progress | None = None,
) -> RetrievalReport:
    """Ingest ``dataset`` into the memory at ``url`` (default: a new SQLite file, removed after) with the
    settings of ``config`` (a remem.toml) or ``settings``, and measure retrieval on its questions."""
    from remem.layout import thread_messages
    from remem.memory import Memory
    from remem.store import hybrid_search

    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ConfigError(f"unknown search mode(s) {unknown}; use some of {', '.join(MODES)}")
    chosen = settings or _settings_for(config)
    report = RetrievalReport(
        name=str(dataset.get("name", "dataset")),
        configuration=str(config) if config else "settings",
        ks=tuple(ks),
        modes=tuple(modes),
        budgets=tuple(budgets),
    )
    report.latency_ms = {m: [] for m in modes}
    report.card_tokens = {b: [] for b in budgets}
    depth = max(max(ks), 25)
    conversations = dataset["conversations"]
    with tempfile.TemporaryDirectory(prefix="remem-eval-") as folder:
        target = url or f"sqlite:///{Path(folder) / 'eval.db'}"
        with Memory.from_url(target, settings=chosen, meter_embeddings=True) as memory:
            ingest(memory, conversations, progress)
            total = sum(len(c["questions"]) for c in conversations)
            done = 0
            for conv in conversations:
                thread_id = f"eval-{conv['id']}"
                thread = memory.get_thread(thread_id)
                for q in conv["questions"]:
                    row: dict[str, Any] = {
                        "id": q["id"],
                        "category": q["category"],
                        "ranks": {},
                        "in_card": {},
                    }
                    for mode in modes:
                        started = time.perf_counter()
                        hits = hybrid_search(
                            memory.store,
                            thread_messages(thread_id),
                            q["question"],
                            mode=mode,  # type: ignore[arg-type]
                            limit=depth,
                        )
                        report.latency_ms[mode].append((time.perf_counter() - started) * 1000)
                        report.modes_run.setdefault(
                            mode, str(getattr(hits[0], "mode", mode)) if hits else mode
                        )
                        row["ranks"][mode] = _rank([h.key for h in hits], q["evidence"])
                    for budget in budgets:
                        card = thread.get_context_card(query=q["question"], token_budget=budget)
                        shown = {r.id for r in card.records} | {m.id for m in card.recent}
                        row["in_card"][str(budget)] = bool(q["evidence"]) and set(q["evidence"]) <= shown
                        if q.get("superseded"):  # the old fact still shown next to the new one
                            stale = row.setdefault("superseded_in_card", {})
                            stale[str(budget)] = bool(set(q["superseded"]) & shown)
                        report.card_tokens[budget].append(card.token_count)
                    report.questions.append(row)
                    done += 1
                    if progress:
                        progress("questions", done, total)
            if memory.meter is not None:
                for totals in memory.meter.ledger.totals()[:1]:
                    report.ledger = {
                        "calls": totals.calls,
                        "tokens": totals.tokens,
                        "cost": totals.cost,
                        "unpriced_calls": totals.unpriced,
                    }
    return report


# ----------------------------------------------------------------------------- two configurations


@dataclass
class Comparison:
    """Two reports on the same questions; ``differences[mode][k]``: (B - A, low, high) of recall@k,
    with a 95% paired bootstrap interval."""

    a: RetrievalReport
    b: RetrievalReport
    differences: dict[str, dict[int, tuple[float, float, float]]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.as_dict(),
            "b": self.b.as_dict(),
            "difference_b_minus_a": {
                mode: {f"@{k}": {"diff": d, "low": lo, "high": hi} for k, (d, lo, hi) in by_k.items()}
                for mode, by_k in self.differences.items()
            },
        }


def paired_bootstrap(
    a: Sequence[bool], b: Sequence[bool], *, samples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """The mean of ``b - a`` over paired questions and its 95% bootstrap interval (questions resampled)."""
    if len(a) != len(b) or not a:
        raise ConfigError("a paired comparison needs the same questions, at least one, on both sides")
    diffs = [int(y) - int(x) for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    return sum(diffs) / n, means[int(0.025 * samples)], means[int(0.975 * samples) - 1]


def compare(
    dataset: dict[str, Any], config_a: str | Path, config_b: str | Path, **options: Any
) -> Comparison:
    """Run :func:`evaluate_retrieval` with each configuration, on its own new database, and compare."""
    a = evaluate_retrieval(dataset, config=config_a, **options)
    b = evaluate_retrieval(dataset, config=config_b, **options)
    differences = {
        mode: {k: paired_bootstrap(a.found(mode, k), b.found(mode, k)) for k in a.ks} for mode in a.modes
    }
    return Comparison(a, b, differences)


# ----------------------------------------------------------------------------- rendering


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(report: RetrievalReport, comparison: Comparison | None = None) -> str:
    """The report as Markdown tables: recall@k per mode and category, evidence in the card per budget,
    latency, tokens and cost; with a comparison, the differences and their intervals."""
    lines = [f"## Retrieval on {report.name} ({len(report.questions)} questions, {report.configuration})", ""]
    heads = ["mode", "category", *(f"R@{k}" for k in report.ks)]
    lines += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for mode in report.modes:
        for category in [None, *report.categories()]:
            cells = [_cell(report.recall(mode, k, category)) for k in report.ks]
            lines.append(f"| {mode} | {category or 'all'} | " + " | ".join(cells) + " |")
    lines += ["", "| category | " + " | ".join(f"in card @{b} tokens" for b in report.budgets) + " |"]
    lines.append("|" + "---|" * (len(report.budgets) + 1))
    for category in [None, *report.categories()]:
        lines.append(
            f"| {category or 'all'} | "
            + " | ".join(_cell(report.in_card(b, category)) for b in report.budgets)
            + " |"
        )
    if any("superseded_in_card" in q for q in report.questions):
        lines.append(
            "| superseded fact still in card | "
            + " | ".join(_cell(report.superseded_in_card(b)) for b in report.budgets)
            + " |"
        )
    data = report.as_dict()
    lines += ["", "| mode | p50 ms | p95 ms |", "|---|---|---|"]
    for mode, lat in data["latency_ms"].items():
        lines.append(f"| {mode} | {_cell(lat['p50'])} | {_cell(lat['p95'])} |")
    tokens = ", ".join(f"{b}: {_cell(v)}" for b, v in data["card_tokens_mean"].items())
    ledger = data["ledger"] or {}
    lines += [
        "",
        f"Mean card tokens per budget: {tokens}. Ledger: {ledger.get('calls', 0)} calls, "
        f"{ledger.get('tokens', 0)} tokens, cost {ledger.get('cost', 0.0):.6f} "
        f"({ledger.get('unpriced_calls', 0)} unpriced).",
    ]
    if comparison is not None:
        lines += [
            "",
            f"### B - A ({comparison.b.configuration} minus {comparison.a.configuration}), 95% paired bootstrap",
            "",
        ]
        lines += [
            "| mode | " + " | ".join(f"R@{k}" for k in report.ks) + " |",
            "|" + "---|" * (len(report.ks) + 1),
        ]
        for mode, by_k in comparison.differences.items():
            cells = [f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]" for d, lo, hi in by_k.values()]
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def pyplot() -> Any:
    """matplotlib's pyplot drawing to files (no display), or the error that names the extra to install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from remem.errors import MissingDependencyError

        raise MissingDependencyError.for_extra("matplotlib", "plot") from None
    return plt


def write_chart(report: RetrievalReport, path: Path, comparison: Comparison | None = None) -> None:
    """A PNG bar chart of recall@k per mode (both configurations side by side when comparing)."""
    plt = pyplot()
    reports = [report] if comparison is None else [comparison.a, comparison.b]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / (len(report.modes) * len(reports))
    for i, (mode, r) in enumerate((m, r) for r in reports for m in report.modes):
        xs = [n + i * width for n in range(len(report.ks))]
        label = mode if comparison is None else f"{mode} ({'A' if r is comparison.a else 'B'})"
        ax.bar(xs, [r.recall(mode, k) or 0.0 for k in report.ks], width, label=label)
    ax.set_xticks([n + 0.4 - width / 2 for n in range(len(report.ks))], [f"@{k}" for k in report.ks])
    ax.set_ylim(0, 1)
    ax.set_ylabel("recall")
    ax.set_title(f"retrieval on {report.name}")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
