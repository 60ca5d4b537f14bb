"""``remem eval generate`` (a seeded dataset in four languages) and ``remem eval retrieval`` on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from remem import Memory
from remem.cli import main
from remem.errors import ConfigError, NotFoundError
from remem.eval import CATEGORIES, generate, load_dataset, paired_bootstrap, save_dataset, session_date
from remem.eval._retrieval import ingest
from remem.testing import offline_settings


def _turns(conversation: dict[str, Any]) -> dict[str, tuple[int, dict[str, Any]]]:
    return {t["id"]: (n, t) for n, s in enumerate(conversation["sessions"]) for t in s["turns"]}


def test_the_generator_is_seeded_and_plants_what_its_questions_ask() -> None:
    data = generate(seed=5, per_language=1)
    assert data == generate(seed=5, per_language=1) and data != generate(seed=6, per_language=1)
    assert [c["language"] for c in data["conversations"]] == ["en", "fr", "zh", "ko"]
    assert {q["category"] for c in data["conversations"] for q in c["questions"]} == set(CATEGORIES)
    for conv in data["conversations"]:
        turns = _turns(conv)
        dates = [s["date"] for s in conv["sessions"]]
        assert dates == sorted(dates) and len(set(dates)) == len(dates)  # dated sessions, in order
        assert len(turns) == sum(len(s["turns"]) for s in conv["sessions"])  # ids are unique
        for q in conv["questions"]:
            evidence = [turns[e] for e in q["evidence"]]
            assert evidence and all(t["role"] == "user" for _, t in evidence)
            if q["category"] == "temporal":
                assert q["answer"] == dates[evidence[0][0]]  # "when": the session's date
            else:
                assert q["answer"] and q["answer"] in evidence[-1][1]["content"]
            for d in q["distractors"]:
                assert q["answer"] not in turns[d][1]["content"]
            if q["category"] == "supersession":
                (old,) = q["superseded"]
                assert turns[old][0] < evidence[0][0]  # the new fact comes in a later session
            if q["category"] == "multi-hop":
                assert len(q["evidence"]) == 2


def test_the_jsonl_form_and_locomos_layout_read_back(tmp_path: Path) -> None:
    data = generate(seed=1, per_language=1, languages=["en", "ko"], sessions=3, facts=1)
    save_dataset(data, tmp_path / "d.jsonl")
    again = load_dataset(tmp_path / "d.jsonl")
    assert again["conversations"] == data["conversations"]
    locomo = [
        {
            "sample_id": "conv-1",
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Bo",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ana", "dia_id": "D1:1", "text": "I moved to Lyon."},
                    {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice!"},
                ],
            },
            "qa": [
                {"question": "Where did Ana move?", "answer": "Lyon", "evidence": ["D1:1"], "category": 1}
            ],
        }
    ]
    (tmp_path / "locomo.json").write_text(json.dumps(locomo), encoding="utf-8")
    (conv,) = load_dataset(tmp_path / "locomo.json")["conversations"]
    assert conv["sessions"][0]["turns"][0] == {
        "id": "conv-1:D1:1",
        "role": "user",
        "content": "I moved to Lyon.",
        "speaker": "Ana",  # the name is kept beside the role, for ingestion to index
    }
    assert session_date(conv["sessions"][0]["date"]) == "2023-05-08"
    assert (
        conv["questions"][0]["evidence"] == ["conv-1:D1:1"] and conv["questions"][0]["category"] == "locomo-1"
    )
    flat = {  # the layout of bench/data/retrieval_*.json
        "name": "dev",
        "conversations": [
            {
                "id": "c0",
                "turns": [
                    {"id": "c0-t0", "session": 0, "date": "2025-03-10", "role": "user", "content": "x"}
                ],
                "questions": [{"question": "q?", "type": "lexical", "answers": ["c0-t0"]}],
            }
        ],
    }
    (tmp_path / "flat.json").write_text(json.dumps(flat), encoding="utf-8")
    (conv,) = load_dataset(tmp_path / "flat.json")["conversations"]
    assert conv["sessions"][0]["date"] == "2025-03-10"
    assert conv["sessions"][0]["turns"][0]["id"] == "c0-t0" and conv["questions"][0]["evidence"] == ["c0-t0"]
    (tmp_path / "bad.jsonl").write_text('{"type": "turn"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="line 1"):
        load_dataset(tmp_path / "bad.jsonl")
    with pytest.raises(NotFoundError, match="remem eval generate"):
        load_dataset(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="unknown language"):
        generate(languages=["de"])


@pytest.mark.parametrize(
    ("written", "day"),
    [
        ("2023-05-08", "2023-05-08"),
        ("2023-05-08T18:30:00Z", "2023-05-08"),
        ("1:56 pm on 8 May, 2023", "2023-05-08"),  # LoCoMo's layout
        ("29.12.2023, 22:42:04", "2023-12-29"),  # REALTALK
        ("March-15-2024", "2024-03-15"),  # BEAM
        ("8 May 2023", "2023-05-08"),
        ("May 8, 2023", "2023-05-08"),
        ("2023-13-45", None),
        ("last Tuesday", None),
        ("", None),
        (None, None),
    ],
)
def test_session_dates_are_read_in_their_written_forms(written: object, day: str | None) -> None:
    assert session_date(written) == day


def test_ingestion_keeps_speakers_and_stamps_turns_with_written_session_dates() -> None:
    turns = [
        ("t0", "Ana", "I moved to Lyon last month."),
        ("t1", "Bo", "Nice, I hope the flat is good."),
        ("t2", "Ana", "It is, the kitchen is huge."),
        ("t3", "Cy", "Lyon has great food."),
        ("t4", "Ana", "Yes, and the market on Sunday."),
        ("t5", "Cy", "I should visit."),
    ]
    conversation = {
        "id": "c",
        "sessions": [
            {
                "id": "c-s0",
                "date": "1:56 pm on 8 May, 2023",
                "turns": [
                    {
                        "id": i,
                        "role": "user" if who == "Ana" else "assistant",
                        "content": text,
                        "speaker": who,
                    }
                    for i, who, text in turns
                ],
            }
        ],
        "questions": [],
    }
    with Memory.from_url("memory://", settings=offline_settings()) as memory:
        ingest(memory, [conversation])
        stored = {m.id: m for m in memory.get_thread("eval-c").messages()}
        assert stored["t1"].metadata.get("speaker") == "Bo"
        assert {m.timestamp[:10] for m in stored.values()} == {"2023-05-08"}
        # Bo's name is in none of the turns' text: only the speaker indexed with it finds his turn
        assert [r.id for r in memory.search("Bo", thread_id="eval-c", k=1)] == ["t1"]
        found = {r.id for r in memory.search("what did Cy say", thread_id="eval-c", k=2)}
        assert found == {"t3", "t5"}


def test_the_paired_bootstrap_interval() -> None:
    assert paired_bootstrap([False] * 8, [True] * 8) == (1.0, 1.0, 1.0)
    a = [True, False] * 20
    b = [True, True] * 20
    diff, low, high = paired_bootstrap(a, b, seed=3)
    assert diff == 0.5 and 0.25 < low < diff < high < 0.75
    with pytest.raises(ConfigError):
        paired_bootstrap([True], [True, False])


@pytest.fixture
def small_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        ["eval", "generate", "--out", "set.json", "--per-language", "1", "--sessions", "3", "--facts", "2"],
    )
    assert result.exit_code == 0, result.output
    assert "4 conversations, 20 questions" in result.output
    return tmp_path / "set.json"


def test_eval_retrieval_reports_recall_cards_latency_and_cost(small_set: Path, tmp_path: Path) -> None:
    env = {"REMEM_EMBEDDER": "fake"}
    result = CliRunner().invoke(
        main,
        ["eval", "retrieval", str(small_set), "--out", "res", "--budget", "300", "--budget", "2000"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert "| hybrid | all |" in result.output and "in card @300 tokens" in result.output
    report = json.loads((tmp_path / "res" / "retrieval.json").read_text(encoding="utf-8"))
    assert report["questions"] == 20 and set(report["recall"]) == {"keyword", "vector", "hybrid"}
    for mode, by_category in report["recall"].items():
        assert set(by_category) == {"all", *CATEGORIES}
        values = [by_category["all"][f"@{k}"] for k in (1, 5, 10, 25)]
        assert values == sorted(values), mode  # recall grows with k
    # A question sharing a word with its turn is found by keyword search within 25 of ~40 turns.
    assert report["recall"]["keyword"]["lexical"]["@25"] == 1.0
    rows = report["per_question"]
    found = sum(r["ranks"]["hybrid"] is not None and r["ranks"]["hybrid"] <= 5 for r in rows)
    assert report["recall"]["hybrid"]["all"]["@5"] == found / len(rows)  # the table is the rows' count
    assert report["in_card"]["all"]["2000"] >= report["in_card"]["all"]["300"] > 0
    assert report["card_tokens_mean"]["300"] <= 300 < report["card_tokens_mean"]["2000"]
    stale = [r["superseded_in_card"]["2000"] for r in rows if r["category"] == "supersession"]
    assert len(stale) == 4 and report["superseded_in_card"]["2000"] == sum(stale) / 4
    assert set(report["latency_ms"]) == {"keyword", "vector", "hybrid"}
    assert report["ledger"]["calls"] > 0  # the embedder's batches, from the usage ledger
    assert (tmp_path / "res" / "retrieval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "res" / "retrieval.md").read_text(encoding="utf-8").startswith("## Retrieval on")


def test_eval_retrieval_compares_two_configurations_on_the_same_questions(
    small_set: Path, tmp_path: Path
) -> None:
    for name in ("a.toml", "b.toml"):
        (tmp_path / name).write_text('[remem]\nembedder = "fake"\n', encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["eval", "retrieval", str(small_set), "--compare", "a.toml", "b.toml", "--budget", "500", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["a"]["recall"] == data["b"]["recall"]  # the same configuration twice: the same answers
    assert data["difference_b_minus_a"]["hybrid"]["@10"] == {"diff": 0.0, "low": 0.0, "high": 0.0}
    usage = CliRunner().invoke(
        main, ["eval", "retrieval", str(small_set), "--compare", "a.toml", "b.toml", "--db", "x"]
    )
    assert usage.exit_code == 2


@pytest.mark.postgres
def test_eval_retrieval_ingests_into_postgres_too(pg_url: str, tmp_path: Path) -> None:
    data = tmp_path / "ko.json"
    save_dataset(generate(seed=3, per_language=1, languages=["ko"], sessions=3, facts=1), data)
    result = CliRunner().invoke(
        main,
        ["eval", "retrieval", str(data), "--db", pg_url, "--budget", "500", "--json"],
        env={"REMEM_EMBEDDER": "fake"},
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["questions"] == 4 and report["modes_run"]["keyword"] == "keyword"
    assert report["recall"]["hybrid"]["all"]["@25"] > 0  # Korean turns found (words split into bigrams)
