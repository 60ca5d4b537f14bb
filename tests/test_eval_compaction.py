"""`remem eval compaction`: tokens per turn per strategy over a generated conversation, and which planted
facts are still in front of the model; JSON, Markdown and a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from remem.cli import main
from remem.config import load_settings
from remem.eval import evaluate_compaction, generate, save_dataset


def _tiny(answer: str = "Biscuit") -> dict[str, Any]:
    turns = [
        {"id": "t0", "role": "user", "content": f"My dog is called {answer}."},
        {"id": "t1", "role": "assistant", "content": "Nice dog."},
    ]
    for n in range(2, 12, 2):
        turns += [
            {"id": f"t{n}", "role": "user", "content": f"Small talk number {n}."},
            {"id": f"t{n + 1}", "role": "assistant", "content": "Sure."},
        ]
    question = {"id": "q0", "question": "What is my dog's name?", "answer": answer, "category": "paraphrase",
                "evidence": ["t0"]}  # fmt: skip
    sessions = [{"id": "s0", "date": "2025-03-10", "turns": turns}]
    return {"conversations": [{"id": "c0", "language": "en", "sessions": sessions, "questions": [question]}]}


def test_a_fact_leaves_the_window_of_filter_and_stays_in_the_summary() -> None:
    settings = load_settings(environ={}, config_file=None, keep_messages=2, summary_trigger_messages=4)
    report = evaluate_compaction(_tiny(), strategies=["filter", "summary"], settings=settings)
    filtered, summary = report.runs
    assert report.facts == 1 and filtered.facts_said == [1] * 6
    assert (
        filtered.facts_in_front[0] == 1 and filtered.facts_in_front[-1] == 0
    )  # said, then out of the window
    assert summary.facts_in_front[-1] == 1  # folded into the rolling summary
    assert filtered.tokens[-1] < sum(filtered.tokens) / 2  # the window does not grow


def test_the_command_writes_json_markdown_and_a_chart(tmp_path: Path) -> None:
    data = tmp_path / "eval.json"
    save_dataset(generate(seed=21, per_language=1, languages=["en"], sessions=4), data)
    (tmp_path / "sizes.toml").write_text("keep_messages = 6\nmax_tokens = 400\n", encoding="utf-8")
    out = tmp_path / "results"
    result = CliRunner().invoke(
        main, ["eval", "compaction", str(data), "--config", str(tmp_path / "sizes.toml"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "| strategy | turns | tokens total" in result.output
    report = json.loads((out / "compaction.json").read_text(encoding="utf-8"))
    runs = {r["strategy"]: r for r in report["strategies"]}
    assert set(runs) == {"filter", "delete", "trim", "summary"} and report["facts"] >= 4
    assert all(r["turns"] == runs["filter"]["turns"] > 10 for r in runs.values())
    assert runs["trim"]["tokens_max"] <= 400 + 60  # the budget, and the one question it never drops
    assert runs["summary"]["facts_in_front_last"] > runs["filter"]["facts_in_front_last"]
    assert (out / "compaction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Compaction on en0" in (out / "compaction.md").read_text(encoding="utf-8")
    missing = CliRunner().invoke(main, ["eval", "compaction", str(data), "--conversation", "nope"])
    assert missing.exit_code == 1 and "no conversation 'nope'" in missing.output
