"""Leave one set out: each constant of the fusion rule chosen on every dev set but one, and measured on the
one left out, for each set in turn (bench/retrieval.py prints the table).

A rule is judged on a set by its margin: hybrid recall@k minus the better of keyword and vector recall@k,
for k = 5 and 10 (the invariant: never below the better part). On the sets it is chosen on, of the rules
that hold the invariant on all of them the one with the higher mean recall@5 and @10 wins; when none
does, of those within half a question in a hundred of the best worst margin. What is reported is the
chosen rule's numbers on the set it was not chosen on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CHOOSE_KS = (5, 10)  # the ks of the invariant (hybrid >= the better part)
REPORT_KS = (1, 5, 10)

Recalls = Callable[[Any, Any], dict[int, float]]  # (a set's result, a rule) -> recall@k of that rule


@dataclass(frozen=True)
class Fold:
    """One left-out set: the rule chosen on the others and its margin there, and what it does on this one."""

    left_out: str
    rule: Any
    chosen_margin: float
    hybrid: dict[int, float]
    keyword: dict[int, float]
    vector: dict[int, float]

    @property
    def margin(self) -> float:
        """Hybrid minus the better part on the left-out set, at its worst k of ``CHOOSE_KS``."""
        return min(self.hybrid[k] - max(self.keyword[k], self.vector[k]) for k in CHOOSE_KS)


def _score(
    rule: Any, sets: Sequence[Any], recalls: Recalls, parts: dict[int, dict[str, Any]]
) -> tuple[float, float]:
    worst, total = 1.0, 0.0
    for result in sets:
        mine = recalls(result, rule)
        best = parts[id(result)]
        worst = min(worst, *(mine[k] - max(best["keyword"][k], best["vector"][k]) for k in CHOOSE_KS))
        total += sum(mine[k] for k in CHOOSE_KS) / len(CHOOSE_KS)
    return worst, total / max(len(sets), 1)


def choose(
    rules: Sequence[Any], sets: Sequence[Any], recalls: Recalls, parts: dict[int, dict[str, Any]]
) -> tuple[Any, float]:
    """The rule of ``rules`` with the best worst margin over ``sets`` (ties: the higher mean recall)."""
    scored = [(rule, *_score(rule, sets, recalls, parts)) for rule in rules]
    top = max(worst for _, worst, _ in scored)
    # the rules that hold the invariant on every set, if any; else those within half a point of the best
    floor = 0.0 if top >= 0 else top - 0.005
    rule, worst, _ = max((s for s in scored if s[1] >= floor), key=lambda s: s[2])
    return rule, worst


def leave_one_set_out(
    results: dict[str, Any],
    rules: Sequence[Any],
    recalls: Recalls,
    parts: Callable[[Any], dict[str, dict[int, float]]],
    groups: dict[str, list[str]] | None = None,
) -> list[Fold]:
    """One fold per set of ``results`` (name -> that set's evaluation with one embedder): the rule chosen
    on the other sets, measured on it. ``parts(result)``: keyword and vector recall@k of a set.
    ``groups``: set -> the names in ``results`` that are that set (the same turns indexed in different
    ways): a set is left out with all of them, and each gets its row."""
    groups = groups or {name: [name] for name in results}
    part = {id(r): parts(r) for r in results.values()}
    folds = []
    for left, names in groups.items():
        others = [results[n] for g, ns in groups.items() if g != left for n in ns]
        rule, worst = choose(rules, others, recalls, part)
        for name in names:
            result = results[name]
            folds.append(
                Fold(
                    name,
                    rule,
                    worst,
                    recalls(result, rule),
                    part[id(result)]["keyword"],
                    part[id(result)]["vector"],
                )
            )
    return folds


def print_folds(embedder: str, folds: list[Fold], describe: Callable[[Any], str]) -> None:
    """The leave-one-set-out table of one embedder, as markdown."""
    print(
        f"\n### Leave one set out ({embedder}): the rule chosen on the other sets, measured on the left-out one\n"
    )
    cols = " | ".join(f"{m} r@{k}" for m in ("keyword", "vector", "hybrid") for k in REPORT_KS)
    print(f"| left out | rule chosen on the others | margin there | {cols} | margin here |")
    print(f"|---|---|---:|{'---:|' * 3 * len(REPORT_KS)}---:|")
    for f in folds:
        cells = " | ".join(
            f"{100 * part[k]:.1f}" for part in (f.keyword, f.vector, f.hybrid) for k in REPORT_KS
        )
        flag = "" if f.margin >= 0 else " (below)"
        print(
            f"| {f.left_out} | {describe(f.rule)} | {100 * f.chosen_margin:+.1f} | {cells} | {100 * f.margin:+.1f}{flag} |"
        )


def choose_option(
    scores: dict[str, dict[str, dict[str, dict[int, float]]]], mode: str = "hybrid"
) -> list[tuple[str, str, dict[str, dict[int, float]]]]:
    """Leave one set out over discrete options (an embedder, what is indexed): ``scores[option][set][mode]``
    is recall@k. For each set, the option with the best mean ``mode`` recall at ``CHOOSE_KS`` over the
    other sets (ties: the first option), and its recall on the left-out set: (set, option, its recalls).
    Only the sets every option ran on count."""
    sets = sorted(set.intersection(*(set(per) for per in scores.values()))) if scores else []
    folds = []
    for left in sets:
        usable = list(scores)

        def mean(option: str, left: str = left) -> float:
            others = [scores[option][s][mode] for s in sets if s != left]
            return sum(r[k] for r in others for k in CHOOSE_KS) / max(len(others) * len(CHOOSE_KS), 1)

        best = max(usable, key=mean) if usable else ""
        folds.append((left, best, scores[best][left] if best else {}))
    return folds
