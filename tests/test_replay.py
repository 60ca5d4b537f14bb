"""`remem replay TRANSCRIPT --model M`: an exported thread's user turns sent to another model (a real
OpenAI-compatible endpoint, scripted), side by side with the original; the replay's calls exported beside."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
from remem.cli import main
from remem.eval import read_transcript
from remem.testing import offline_settings
from tests.openai_server import openai_compatible_server

USER_TURNS = ["I'm Maya and I live in Porto.", "I keep bees.", "Where do I live?"]


def _exported(tmp_path: Path) -> Path:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    model = ScriptedChatModel(replies=["Hello Maya.", "Bees, nice.", "In Porto."])
    with checkpointer_from_url(url) as saver:
        agent = build_agent(model, checkpointer=saver, summarizer="extractive", settings=offline_settings())
        for text in USER_TURNS:
            run_turn(agent, "t1", text)
    exported = CliRunner().invoke(main, ["export", "t1", "--db", url], env={"REMEM_EMBEDDER": "fake"})
    assert exported.exit_code == 0, exported.output
    path = tmp_path / "t1.jsonl"
    path.write_text(exported.stdout, encoding="utf-8")
    return path


def test_a_transcript_is_replayed_with_another_model_side_by_side(tmp_path: Path) -> None:
    path = _exported(tmp_path)
    original = read_transcript(path)
    assert [t.user for t in original] == USER_TURNS
    assert [t.answer for t in original] == ["Hello Maya.", "Bees, nice.", "In Porto."]
    out = tmp_path / "replay"
    with openai_compatible_server(["Hi Maya!", "Bees!", "You live in Porto."]) as server:
        env = {"REMEM_EMBEDDER": "fake", "REMEM_LLM_BASE_URL": server.url, "REMEM_LLM_API_KEY": "sk-test"}
        result = CliRunner().invoke(
            main, ["replay", str(path), "--model", "other-model", "--out", str(out)], env=env
        )
    assert result.exit_code == 0, result.output
    assert [r["model"] for r in server.requests] == ["other-model"] * 3
    assert server.requests[-1]["messages"][-1]["content"] == "Where do I live?"
    report = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    assert report["model"] == "other-model"
    turns = report["turns"]
    assert [t["user"] for t in turns] == USER_TURNS
    assert [t["original"]["answer"] for t in turns] == ["Hello Maya.", "Bees, nice.", "In Porto."]
    assert [t["replay"]["answer"] for t in turns] == ["Hi Maya!", "Bees!", "You live in Porto."]
    assert all(
        t["replay"]["input_tokens"] > 0 and t["replay"]["output_tokens"] > 0 for t in turns
    )  # the ledger
    assert turns[2]["replay"]["input_tokens"] > turns[0]["replay"]["input_tokens"]  # the history grew
    assert "answers unchanged: 0/3" in (out / "replay.md").read_text(encoding="utf-8")
    # The replay's own transcript, in the export format, is kept next to the results.
    replayed = read_transcript(out / "replay.transcript.jsonl")
    assert [(t.user, t.answer, t.models) for t in replayed] == [
        (u, a, ["other-model"])
        for u, a in zip(USER_TURNS, ["Hi Maya!", "Bees!", "You live in Porto."], strict=True)
    ]


def test_a_file_that_is_no_transcript_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "message"}\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["replay", str(bad), "--model", "m", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "remem export THREAD --format jsonl" in result.output
    assert not (tmp_path / "o").exists()
