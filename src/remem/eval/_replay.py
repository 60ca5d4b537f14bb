"""Replay an exported transcript's user turns through the agent with another model, side by side.

    original = read_transcript(Path("t1.jsonl"))            # `remem export t1 > t1.jsonl`
    report = replay(original, model, url="sqlite:///replay.db")
    print(replay_markdown(report))

Each user turn of the transcript (``remem.transcript/1``) is sent, in order, to a new thread of an agent
(:func:`remem.build_agent`) on the database at ``url``, whose usage ledger records every call of the
replay; the report puts each turn's original answer, tokens, cost and latency next to the replay's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from remem.config import Settings, load_settings
from remem.errors import RememUsageError

__all__ = ["OriginalTurn", "ReplayReport", "read_transcript", "replay", "replay_markdown"]

TRANSCRIPT_FORMAT = "remem.transcript/1"


@dataclass
class OriginalTurn:
    """One turn of a transcript: what the user said, what the model answered, and what it took."""

    turn: int
    user: str
    answer: str = ""
    models: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    latency_ms: float | None = None


def read_transcript(lines: Iterable[str] | Path) -> list[OriginalTurn]:
    """The user turns of a ``remem.transcript/1`` JSONL export, with their answers and ledger totals."""
    where = str(lines) if isinstance(lines, Path) else "the transcript"
    text = lines.read_text(encoding="utf-8").splitlines() if isinstance(lines, Path) else list(lines)
    turns: dict[int, OriginalTurn] = {}
    head: dict[str, Any] | None = None
    for number, line in enumerate(text, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RememUsageError(
                f"{where}:{number} is not JSON ({exc.msg}); give a `remem export` JSONL"
            ) from None
        if head is None:
            if not isinstance(record, dict) or record.get("format") != TRANSCRIPT_FORMAT:
                raise RememUsageError(
                    f"{where} does not start with a {TRANSCRIPT_FORMAT} thread line; make it with "
                    "`remem export THREAD --format jsonl > FILE`"
                )
            head = record
            continue
        n = record.get("turn")
        if not isinstance(n, int) or isinstance(n, bool):
            continue
        if record.get("type") == "message" and record.get("role") == "user" and n not in turns:
            turns[n] = OriginalTurn(turn=n, user=str(record.get("content", "")))
        elif record.get("type") == "message" and record.get("role") == "assistant" and n in turns:
            if record.get("content"):
                turns[n].answer = str(record["content"])
        elif record.get("type") == "turn" and n in turns:
            found = turns[n]
            found.models = list(record.get("models") or [])
            found.input_tokens = int(record.get("input_tokens") or 0)
            found.output_tokens = int(record.get("output_tokens") or 0)
            found.cost = record.get("cost")
            found.latency_ms = record.get("latency_ms")
    if head is None:
        raise RememUsageError(f"{where} is empty; make it with `remem export THREAD --format jsonl > FILE`")
    if not turns:
        raise RememUsageError(f"{where} holds no user turn to replay")
    return [turns[n] for n in sorted(turns)]


@dataclass
class ReplayedTurn:
    original: OriginalTurn
    answer: str
    input_tokens: int
    output_tokens: int
    cost: float | None
    latency_ms: float

    def as_dict(self) -> dict[str, Any]:
        o = self.original
        return {
            "turn": o.turn,
            "user": o.user,
            "original": {"answer": o.answer, "models": o.models, "input_tokens": o.input_tokens,
                         "output_tokens": o.output_tokens, "cost": o.cost, "latency_ms": o.latency_ms},
            "replay": {"answer": self.answer, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                       "cost": self.cost, "latency_ms": round(self.latency_ms, 1)},
        }  # fmt: skip


@dataclass
class ReplayReport:
    model: str
    thread_id: str
    turns: list[ReplayedTurn]

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "thread": self.thread_id, "turns": [t.as_dict() for t in self.turns]}


def _model_name(model: BaseChatModel) -> str:
    return str(getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__)


def replay(
    turns: list[OriginalTurn],
    model: BaseChatModel,
    *,
    url: str,
    settings: Settings | None = None,
    thread_id: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Send each user turn, in order, to one new thread of the agent on ``url`` (its ledger records the
    calls); the replay's answers, tokens and cost (from the ledger) and latency next to the original's."""
    from remem.agent import build_agent, run_turn
    from remem.checkpoint import checkpointer_from_url
    from remem.usage import read_ledger

    settings = settings or load_settings()
    thread_id = thread_id or "replay-" + uuid.uuid4().hex[:12]
    done: list[tuple[OriginalTurn, str, float]] = []
    with checkpointer_from_url(url) as saver:
        agent = build_agent(model, checkpointer=saver, summarizer="extractive", settings=settings)
        for n, turn in enumerate(turns):
            started = time.perf_counter()
            reply = run_turn(agent, thread_id, turn.user, max_message_chars=settings.max_message_chars)
            done.append((turn, reply.text, (time.perf_counter() - started) * 1000))
            if progress:
                progress(n + 1, len(turns))
    totals: dict[int, Any] = {}
    with read_ledger(url) as ledger:
        if ledger is not None:
            totals = {
                int(t.key[1]): t
                for t in ledger.totals(by="turn", thread_id=thread_id)
                if t.key[1] is not None
            }
    replayed = []
    for n, (turn, answer, ms) in enumerate(done, 1):
        found = totals.get(n)
        data = found.as_dict() if found is not None else {}
        replayed.append(
            ReplayedTurn(turn, answer, int(data.get("input_tokens") or 0), int(data.get("output_tokens") or 0),
                         data.get("cost"), ms)
        )  # fmt: skip
    return ReplayReport(model=_model_name(model), thread_id=thread_id, turns=replayed)


def _short(text: str, width: int = 60) -> str:
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def replay_markdown(report: ReplayReport) -> str:
    """The side-by-side as a Markdown table, with the totals of both runs."""
    lines = [
        f"## Replay with {report.model} (thread {report.thread_id})",
        "",
        "| turn | user | original answer | replayed answer | tokens (orig / new) | cost (orig / new) | latency ms (orig / new) |",
        "|---:|---|---|---|---:|---:|---:|",
    ]  # fmt: skip
    for t in report.turns:
        o = t.original
        old_ms = "-" if o.latency_ms is None else f"{o.latency_ms:.0f}"
        lines.append(
            f"| {o.turn} | {_short(o.user, 40)} | {_short(o.answer)} | {_short(t.answer)} | "
            f"{o.input_tokens + o.output_tokens} / {t.input_tokens + t.output_tokens} | "
            f"{_money(o.cost)} / {_money(t.cost)} | {old_ms} / {t.latency_ms:.0f} |"
        )
    old = sum(t.original.input_tokens + t.original.output_tokens for t in report.turns)
    new = sum(t.input_tokens + t.output_tokens for t in report.turns)
    same = sum(1 for t in report.turns if t.answer.strip() == t.original.answer.strip())
    lines += ["", f"tokens: {old} -> {new}; answers unchanged: {same}/{len(report.turns)}"]
    return "\n".join(lines) + "\n"
