"""`remem eval qa`: each question answered from the context card, judged by a second model (a real
OpenAI-compatible endpoint, scripted), accuracy per category, tokens, cost, and every call saved."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from remem.cli import main
from remem.eval import generate, save_dataset
from tests.openai_server import openai_compatible_server


def test_questions_are_answered_from_the_card_and_judged(tmp_path: Path) -> None:
    dataset = generate(seed=21, per_language=1, languages=["en"], sessions=3)
    questions = dataset["conversations"][0]["questions"]
    data = tmp_path / "eval.json"
    save_dataset(dataset, data)
    verdicts = ["CORRECT" if n % 3 else "WRONG" for n in range(len(questions))]
    replies = [r for n, v in enumerate(verdicts) for r in (f"answer {n}", v)]
    out = tmp_path / "results"
    with openai_compatible_server(replies) as server:
        env = {"REMEM_EMBEDDER": "fake", "REMEM_LLM_BASE_URL": server.url, "REMEM_LLM_API_KEY": "sk-test"}
        args = ["eval", "qa", str(data), "--model", "small", "--judge", "big", "--out", str(out)]
        result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    assert [r["model"] for r in server.requests] == ["small", "big"] * len(questions)
    report = json.loads((out / "qa.json").read_text(encoding="utf-8"))
    assert report["accuracy"] == verdicts.count("CORRECT") / len(questions)
    assert [q["correct"] for q in report["questions"]] == [v == "CORRECT" for v in verdicts]
    assert [q["answer"] for q in report["questions"]] == [f"answer {n}" for n in range(len(questions))]
    assert report["calls"] == 2 * len(questions) and report["tokens"] > 0
    assert all(q["tokens"] > 0 and q["card_tokens"] > 0 for q in report["questions"])
    assert "| all |" in (out / "qa.md").read_text(encoding="utf-8")
    calls = [json.loads(line) for line in (out / "qa.calls.jsonl").read_text(encoding="utf-8").splitlines()]
    first, graded = calls[0], calls[1]
    assert first["call"] == "answer" and first["messages"][-1]["content"] == questions[0]["question"]
    assert (
        "<memory" in first["messages"][1]["content"] or "context" in first["messages"][1]["content"].lower()
    )
    assert graded["call"] == "judge" and questions[0]["answer"] in graded["messages"][-1]["content"]
    assert graded["reply"] == "WRONG" and graded["model"] == "big"


def test_without_a_model_it_says_how_to_configure_one(tmp_path: Path) -> None:
    data = tmp_path / "eval.json"
    save_dataset(generate(seed=1, per_language=1, languages=["en"], sessions=3), data)
    result = CliRunner().invoke(main, ["eval", "qa", str(data)], env={"REMEM_LLM_MODEL": ""})
    assert result.exit_code == 2 and "--model" in result.output
