"""Context cards on the dev sets: is the answer turn in the card, and how long does a card take?

For every question of a dev set of ``bench/retrieval.py`` (``--set generated``, the default:
``bench/data/retrieval_dev.json``, facts planted in one session, asked about sessions later, among
distractors and small talk; ``--set multilingual``: the French, Chinese and Korean set; ``--set beam
--beam PATH``: BEAM's 100K chats from a local copy, never committed), the conversation is
added to a remem ``Memory`` over a SQLite store (each turn with its session's date), and the card is built
with the question as its query at budgets of 500, 1,000 and 2,000 tokens, the client's defaults otherwise.

- **in card**: the answer turn is one of the card's records (shown whole or as an excerpt);
- **evidence shown**: the card shows the answer turn's evidence (``evidence_shown``): the whole turn, or
  an excerpt of it that keeps the turn's sentence sharing the most words with the question's answer (the
  answer text of REALTALK and BEAM; BEAM's stated preference or instruction where it has no answer), or
  with the question where the answer shares none (a date; the generated sets, whose turns are short
  enough to be shown whole, have no answer text);
- **in card or summary**: the answer turn is a record or its text is in the card's summary;
- **build p50 / p95**: the time ``get_context_card`` takes (the summary already made: a refresh); **CPU
  p50**: the process CPU time it takes (what a loaded machine changes least).

Dates: the generated sets' turns carry a session number; session ``s`` is dated ``START + s * SESSION_GAP``
and its turns a minute apart, so every card can show when something was said; BEAM's turns carry their
chat's time anchor.

    python bench/cards.py                          # this checkout
    python bench/cards.py --before ../remem-old    # an older checkout first, then this one, side by side
    python bench/cards.py --embedder fake          # the seeded fake embedder (no model)
    python bench/cards.py --set beam --beam path/to/chats/100K --cache emb-cache   # embeddings kept on disk

Never run on LoCoMo: it is the held-out judge.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BUDGETS = (500, 1000, 2000)
START = dt.datetime(2023, 1, 9, 10, 0, tzinfo=dt.UTC)
SESSION_GAP = dt.timedelta(days=11)


DEV_SET = Path(__file__).parent / "data" / "retrieval_dev.json"
SETS = {"generated": DEV_SET, "multilingual": Path(__file__).parent / "data" / "retrieval_multilingual.json"}


def load_dev_set(
    name: str = "generated", beam: str | None = None, realtalk: str | None = None
) -> dict[str, Any]:
    """A dev set of bench/retrieval.py: the generated sets are read as files (generated first if missing),
    so that ``--before`` can run an older checkout whose search code bench/retrieval.py no longer imports;
    ``beam``: BEAM's chats/100K folder, ``realtalk``: REALTALK's data folder, read by the loaders of
    bench/_shared.py."""
    sys.path.insert(0, str(Path(__file__).parent))
    if name == "beam":
        from _shared import load_beam

        if not beam:
            sys.exit("--set beam needs --beam PATH (BEAM's chats/100K folder)")
        return load_beam(Path(beam))
    if name == "realtalk":
        from _shared import load_realtalk

        if not realtalk:
            sys.exit("--set realtalk needs --realtalk PATH (REALTALK's data folder)")
        return load_realtalk(Path(realtalk))
    if not SETS[name].exists():
        import retrieval

        make = retrieval.generate if name == "generated" else retrieval.generate_multilingual
        SETS[name].parent.mkdir(parents=True, exist_ok=True)
        SETS[name].write_text(json.dumps(make(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    data: dict[str, Any] = json.loads(SETS[name].read_text(encoding="utf-8"))
    return data


def _timestamp(turn: dict[str, Any], position: int) -> str:
    if turn.get("timestamp"):
        return str(turn["timestamp"])
    if turn.get("date") and "session" not in turn:  # BEAM's time anchors, e.g. March-15-2024
        try:
            day = dt.datetime.strptime(str(turn["date"]), "%B-%d-%Y").replace(tzinfo=dt.UTC)
        except ValueError:
            day = START
        when = day + dt.timedelta(minutes=position)
    else:
        when = START + int(turn.get("session", 0)) * SESSION_GAP + dt.timedelta(minutes=position)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _embedder(name: str, cache: str | None = None) -> Any:
    if name == "fake":
        from remem.testing import FakeEmbedder

        return FakeEmbedder(384)
    if cache:  # the embeddings bench/retrieval.py keeps on disk (BEAM's long turns are slow to embed)
        sys.path.insert(0, str(Path(__file__).parent))
        from _shared import DiskCache

        from remem.embeddings import OnnxEmbedder

        return DiskCache(OnnxEmbedder(), Path(cache), "minilm")
    from remem.embeddings import default_embedder

    return default_embedder()


def _messages(conv: dict[str, Any]) -> list[dict[str, Any]]:
    """A dev-set conversation as the memory client's messages: each turn dated (``_timestamp``); a turn
    whose role is a person's name (REALTALK) is the ``user`` if that person spoke first, else the
    ``assistant``, with the name as its speaker."""
    roles: dict[str, str] = {"user": "user", "assistant": "assistant"}
    messages = []
    for position, turn in enumerate(conv["turns"]):
        role = roles.setdefault(turn["role"], "assistant" if len(roles) > 2 else "user")
        message: dict[str, Any] = {
            "role": role,
            "content": turn["content"],
            "id": turn["id"],
            "timestamp": _timestamp(turn, position),
        }
        speaker = turn.get("speaker") or (turn["role"] if turn["role"] not in ("user", "assistant") else None)
        if speaker:
            message["metadata"] = {"speaker": speaker}
        messages.append(message)
    return messages


_RECORD = re.compile(r'<record record_id="([^"]*)"[^>]*>(.*?)</record>', re.S)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")  # as remem.memory._card splits a long turn
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    from remem.messages.words import STOP_WORDS

    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def shown(content: str) -> dict[str, str]:
    """The text a rendered card shows of each record, by record id (unescaped, its role prefix kept)."""
    return {html.unescape(i): html.unescape(text) for i, text in _RECORD.findall(content)}


def evidence_shown(text: str, turn: str, answer: str, question: str) -> bool:
    """Whether ``text`` (what a card shows of a record, ``"role: ..."``) holds the evidence of ``turn``:
    the whole turn, or, where the card shows an excerpt, the turn's sentence that shares the most words
    with the question's ``answer`` (any of those tied for the most); when the answer shares no word with
    the turn (a date, "yes"), the sentence that shares the most with the ``question``. When neither
    shares a word, only the whole turn counts."""
    body = re.sub(r"^(user|assistant|system|tool): ", "", text)
    if body == turn:
        return True
    sentences = [s.strip() for s in _SENTENCE.split(turn) if s.strip()]
    for reference in (answer, question):
        wanted = _words(reference)
        shared = [len(wanted & _words(s)) for s in sentences]
        best = max(shared, default=0)
        if best > 0:
            return any(n == best and s in body for s, n in zip(sentences, shared, strict=True))
    return False


def card_recall(
    dataset: dict[str, Any],
    embedder: Any,
    budgets: tuple[int, ...] = BUDGETS,
    options: dict[str, dict[str, Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """For every budget: how often a question's answer turn is in its card (the question as the query),
    the card's mean tokens and summary share, and its build time p50 / p95 (one row per budget), for each
    of ``options`` (name -> values of the constants of ``remem.memory._card`` or ``remem.memory._search``
    a card is built with; None: the defaults, as ``"default"``). The conversations are stored once; every option builds its own cards."""
    import remem.memory._card as card_module
    import remem.memory._search as search_module
    from remem import Memory
    from remem.store import SqliteStore

    options = options or {"default": {}}
    hits: dict[str, dict[int, list[tuple[bool, bool, bool]]]] = {o: {b: [] for b in budgets} for o in options}
    times: dict[str, dict[int, list[float]]] = {o: {b: [] for b in budgets} for o in options}
    cpus: dict[str, dict[int, list[float]]] = {o: {b: [] for b in budgets} for o in options}
    tokens: dict[str, dict[int, list[int]]] = {o: {b: [] for b in budgets} for o in options}
    share: dict[str, dict[int, list[float]]] = {o: {b: [] for b in budgets} for o in options}
    with SqliteStore.from_conn_string(
        ":memory:", index={"dims": embedder.dims, "embed": embedder, "fields": ["content"]}
    ) as store:
        memory = Memory(store)
        for conv in dataset["conversations"]:
            thread = memory.thread(conv["id"], user_id=f"user-{conv['id']}")
            thread.add_messages(_messages(conv))
            contents = {t["id"]: t["content"] for t in conv["turns"]}
            thread.get_context_card(query="warm-up", token_budget=budgets[0])  # makes the summary once
            for q in conv["questions"]:
                answers = q.get("answers") or [q["answer_id"]]  # the set's two layouts
                for name, values in options.items():
                    where = {k: card_module if hasattr(card_module, k) else search_module for k in values}
                    saved = {k: getattr(where[k], k) for k in values}
                    for k, v in values.items():
                        setattr(where[k], k, v)
                    try:
                        for budget in budgets:
                            start, cpu = time.perf_counter(), time.process_time()
                            card = thread.get_context_card(query=q["question"], token_budget=budget)
                            times[name][budget].append((time.perf_counter() - start) * 1000)
                            cpus[name][budget].append((time.process_time() - cpu) * 1000)
                            in_records = any(r.id in answers for r in card.records)
                            in_summary = any(contents[a] in card.summary for a in answers)
                            lines = shown(card.content)
                            in_text = any(
                                a in lines
                                and evidence_shown(lines[a], contents[a], q.get("answer", ""), q["question"])
                                for a in answers
                            )
                            hits[name][budget].append((in_records, in_records or in_summary, in_text))
                            tokens[name][budget].append(card.token_count)
                            share[name][budget].append(
                                memory.count_text(card.summary) / card.token_count
                                if card.token_count
                                else 0.0
                            )
                    finally:
                        for k, v in saved.items():
                            setattr(where[k], k, v)
    if hasattr(embedder, "save"):
        embedder.save()
    out: dict[str, list[dict[str, Any]]] = {}
    for name in options:
        rows = []
        for budget in budgets:
            n = len(hits[name][budget])
            ordered = sorted(times[name][budget])
            rows.append(
                {
                    "budget": budget,
                    "questions": n,
                    "in_card": sum(a for a, _, _ in hits[name][budget]) / n,
                    "in_card_or_summary": sum(b for _, b, _ in hits[name][budget]) / n,
                    "evidence_shown": sum(c for _, _, c in hits[name][budget]) / n,
                    "tokens_mean": statistics.fmean(tokens[name][budget]),
                    "summary_share": statistics.fmean(share[name][budget]),
                    "p50_ms": statistics.median(ordered),
                    "p95_ms": ordered[min(int(0.95 * n), n - 1)],
                    "cpu_p50_ms": statistics.median(cpus[name][budget]),
                }
            )
        out[name] = rows
    return out


def run(
    embedder_name: str, limit: int | None, set_name: str = "generated", beam: str | None = None,
    cache: str | None = None, realtalk: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    dataset = load_dev_set(set_name, beam, realtalk)
    if limit:
        dataset = {**dataset, "conversations": dataset["conversations"][:limit]}
    rows = card_recall(dataset, _embedder(embedder_name, cache))["default"]
    return {"embedder": embedder_name, "set": set_name, "rows": rows}


def _table(label: str, result: dict[str, Any]) -> None:
    print(f"\n### Context cards, {label} (set: {result.get('set')}, embedder: {result['embedder']})\n")
    print(
        "| budget | questions | in card | evidence shown | in card or summary | tokens (mean) | summary share "
        "| p50 ms | p95 ms | CPU p50 ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(
            f"| {r['budget']:,} | {r['questions']} | {r['in_card']:.1%} | {r['evidence_shown']:.1%} | "
            f"{r['in_card_or_summary']:.1%} | "
            f"{r['tokens_mean']:.0f} | {r['summary_share']:.0%} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
            f"{r['cpu_p50_ms']:.1f} |"
        )


def compare(args: argparse.Namespace) -> None:
    """Run on ``args.before`` (its ``src`` first on PYTHONPATH), then on this checkout, back to back."""
    argv = list(sys.argv[1:])
    at = argv.index("--before")
    del argv[at : at + 2]
    here = Path(__file__).resolve().parents[1]
    results = {}
    for label, root in (("before", Path(args.before).resolve()), ("after", here)):
        out = Path(tempfile.mkdtemp(prefix="remem-cards-")) / f"{label}.json"
        env = {**os.environ, "PYTHONPATH": str(root / "src")}
        print(f"== {label}: {root}", flush=True)
        subprocess.run([sys.executable, __file__, *argv, "--json", str(out), "--quiet"], env=env, check=True)
        results[label] = json.loads(out.read_text())
    before, after = results["before"], results["after"]
    print(
        f"\n### Context cards, before and after (same run, set: {after.get('set')}, embedder: {after['embedder']})\n"
    )
    print(
        "| budget | in card before | in card after | evidence shown before | after | p50 ms before | "
        "p50 ms after | CPU p50 ms before | after |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b, a in zip(before["rows"], after["rows"], strict=True):
        print(
            f"| {a['budget']:,} | {b['in_card']:.1%} | {a['in_card']:.1%} | {b['evidence_shown']:.1%} | "
            f"{a['evidence_shown']:.1%} | {b['p50_ms']:.1f} | {a['p50_ms']:.1f} | {b['cpu_p50_ms']:.1f} | "
            f"{a['cpu_p50_ms']:.1f} |"
        )
    for label, result in results.items():
        _table(label, result)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedder", choices=("minilm", "fake"), default="minilm")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument(
        "--set", choices=("generated", "multilingual", "beam", "realtalk"), default="generated"
    )
    parser.add_argument("--beam", help="BEAM's chats/100K folder (a local copy, for --set beam)")
    parser.add_argument("--realtalk", help="REALTALK's data folder (a local copy, for --set realtalk)")
    parser.add_argument("--cache", help="keep MiniLM's embeddings on disk in this folder")
    parser.add_argument("--before", help="an older checkout: run it first, then this one, side by side")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.before:
        compare(args)
        return
    result = run(args.embedder, args.conversations, args.set, args.beam, args.cache, args.realtalk)
    if args.json:
        Path(args.json).write_text(json.dumps(result), encoding="utf-8")
    if not args.quiet:
        _table("this checkout", result)


if __name__ == "__main__":
    main()
