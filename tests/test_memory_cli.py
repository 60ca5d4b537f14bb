"""`remem card`, `remem summary` and `remem search` on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from remem import Memory, load_settings
from remem.cli import main
from remem.testing import offline_settings

SETTINGS = offline_settings()


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Memory.from_url(url, settings=SETTINGS) as memory:
        memory.thread("support-42", user_id="maya").add_messages(
            [
                {
                    "role": "user",
                    "content": "I'm Maya. I migrate invoice reconciliation to LangGraph.",
                    "id": "u1",
                },
                {"role": "assistant", "content": "Understood.", "id": "a1"},
                {"role": "user", "content": "The ledger enrichment step fails.", "id": "u2"},
                {"role": "user", "content": "Which step fails?", "id": "u3"},
            ]
        )
        memory.store.put(
            ("users", "maya", "memories"), "f1", {"content": "Maya owns the ledger job", "type": "fact"}
        )
    return url


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"REMEM_EMBEDDER": "fake", "REMEM_LLM_MODEL": ""})
    return result.exit_code, result.output


def test_card_prints_the_escaped_xml_and_its_size(db: str) -> None:
    code, out = _run("card", "support-42", "--except-last", "1", "--refresh", "--db", db)
    assert code == 0, out
    assert out.startswith("<context_card>") and "</context_card>" in out
    assert 'record_id="u2"' in out and "Which step fails?" not in out  # the excluded tail stays out
    assert "tokens, summary revision 1" in out and "summary: up to date" in out
    assert f"read from memory store in {db}" in out


def test_card_is_a_read_it_shows_the_stored_summary_and_says_when_it_is_stale(db: str) -> None:
    def revisions() -> int:
        with Memory.from_url(db, settings=SETTINGS) as memory:
            return len(memory.get_thread("support-42").summaries())

    code, out = _run("card", "support-42", "--db", db)
    assert code == 0, out
    assert "summary revision 0" in out and "stale: 4 message(s)" in out and "--refresh" in out
    assert revisions() == 0  # nothing was written
    code, out = _run("card", "support-42", "--refresh", "--db", db)
    assert code == 0 and "summary revision 1" in out and revisions() == 1
    code, out = _run("card", "support-42", "--db", db)
    assert "summary revision 1" in out and "summary: up to date" in out and revisions() == 1


def test_card_rules_and_unknown_threads_are_usage_errors(db: str) -> None:
    code, out = _run("card", "support-42", "--except-last", "2", "--recent", "1", "--db", db)
    assert code == 2 and "zero or the same count" in out
    code, out = _run("card", "nope", "--db", db)
    assert code == 1 and "neither in the memory store nor in the checkpoints" in out


def test_summary_shows_revision_and_coverage(db: str) -> None:
    code, out = _run("summary", "support-42", "--db", db)
    assert code == 0, out
    assert "no summary stored yet (4 messages); --refresh writes one" in out
    code, out = _run("summary", "support-42", "--refresh", "--db", db)
    assert code == 0, out
    assert "revision 1" in out and "covers 4 messages (u1 .. u3)" in out
    assert "invoice reconciliation" in out
    code, again = _run("summary", "support-42", "--db", db)
    assert "revision 1" in again and "summary: up to date" in again


def test_search_lists_typed_records(db: str) -> None:
    code, out = _run("search", "ledger", "--user", "maya", "--thread", "support-42", "--db", db)
    assert code == 0, out
    assert "u2" in out and "f1" in out and "fact" in out and "message" in out
    code, out = _run("search", "ledger", "--db", db)
    assert code == 2 and "--user" in out


def test_card_summary_and_search_read_an_agents_thread_from_its_checkpoints(tmp_path: Path) -> None:
    from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    with checkpointer_from_url(url) as saver:
        agent = build_agent(ScriptedChatModel(default="Noted."), strategy="filter", checkpointer=saver)
        run_turn(agent, "user-001", "My cat is called Biscuit and she hates the vacuum.")
        run_turn(agent, "user-001", "Which step of the ledger job fails?")
    before = (tmp_path / "agent.db").read_bytes()

    code, out = _run("card", "user-001", "--db", url)
    assert code == 0, out
    assert "Biscuit" in out and "read from checkpoints in" in out and "nothing stored" in out
    code, out = _run("summary", "user-001", "--db", url)
    assert code == 0 and "Biscuit" in out and "computed now" in out, out
    code, out = _run("search", "cat Biscuit", "--thread", "user-001", "--db", url)
    assert code == 0 and "Biscuit" in out and not out.startswith("0 records"), out
    assert (tmp_path / "agent.db").read_bytes() == before  # all three were reads
    code, out = _run("search", "cat", "--thread", "nobody", "--db", url)
    assert code == 1 and "neither in the memory store nor in the checkpoints" in out


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_search_on_an_agents_thread_lists_only_matches_with_descending_scores(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import json

    from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn

    url = (
        f"sqlite:///{tmp_path / 'agent.db'}"
        if backend == "sqlite"
        else str(request.getfixturevalue("pg_url"))
    )
    replies = iter(["好的。", "Your parrot Biscuit sounds lovely.", "好的。", *["Fine."] * 20])
    settings = load_settings(
        environ={"REMEM_KEEP_MESSAGES": "4", "REMEM_SUMMARY_TRIGGER_MESSAGES": "8"}, config_file=None
    )
    with checkpointer_from_url(url) as saver:
        agent = build_agent(
            ScriptedChatModel(default=lambda m: next(replies)),
            strategy="summary",
            summarizer="extractive",
            checkpointer=saver,
            settings=settings,
        )
        for text in [
            "谢谢",
            "My parrot is called Biscuit",
            "预算是五百欧元",
            "more",
            "again",
            "still",
            "later",
        ]:
            run_turn(agent, "T", text)

    def search(*args: str) -> list[dict[str, object]]:
        code, out = _run("search", *args, "--db", url, "--json")
        assert code == 0, out
        records: list[dict[str, object]] = json.loads(out)["records"]
        scores = [float(str(r["score"])) for r in records]
        assert scores == sorted(scores, reverse=True), records  # the scores say the order
        return records

    found = search("Biscuit", "--thread", "T")  # the turns a summary replaced are searched too
    assert {str(r["content"]) for r in found if r["type"] == "message"} == {
        "user: My parrot is called Biscuit",
        "assistant: Your parrot Biscuit sounds lovely.",
    }
    assert [r["type"] for r in found][-1] == "summary" and "Biscuit" in str(found[-1]["content"])
    budget = search("预算", "--thread", "T")
    assert [r["content"] for r in budget if r["type"] == "message"] == ["user: 预算是五百欧元"]
    assert search("zanzibar", "--thread", "T") == []  # a word said nowhere finds nothing


def test_search_by_user_alone_says_it_reads_extracted_memories_only(db: str) -> None:
    code, out = _run("search", "invoice reconciliation", "--user", "maya", "--db", db)
    assert code == 0, out
    assert "0 records" in out and "long-term memories of user 'maya'" in out and "--thread" in out
