"""Ingestions you can undo: what a load added goes, with its vectors, keyword rows and extracted memories;
summaries built on it are passed over; an undo killed at any step is finished by the next one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remem import Memory
from remem.cli import main
from remem.errors import NotFoundError, RememUsageError
from remem.extraction._schema import Candidate, memory_value
from remem.ingestion import MESSAGE_TAG, begin_ingestion, get_ingestion, list_ingestions, undo_ingestion
from remem.jobs import open_queue
from remem.layout import user_memories
from remem.testing import offline_settings

SETTINGS = offline_settings()


@pytest.fixture
def memory(db_url: str) -> Iterator[Memory]:
    with Memory.from_url(db_url, settings=SETTINGS) as mem:
        yield mem


def _snapshot(memory: Memory) -> dict[tuple[tuple[str, ...], str], Any]:
    """Every item but the ingestion journal and the summaries (which an undo marks, never deletes)."""
    found: dict[tuple[tuple[str, ...], str], Any] = {}
    for prefix in (("threads",), ("users",), ("_remem", "extraction")):
        offset = 0
        while page := memory.store.search(prefix, limit=200, offset=offset):
            offset += len(page)
            found.update({(i.namespace, i.key): i.value for i in page if i.namespace[-1:] != ("summaries",)})
    for (namespace, _), value in found.items():
        if namespace[-1:] == ("meta",):
            value.pop("summary_revision", None)  # summaries written meanwhile are counted there
    return found


def _extracted(memory: Memory, user: str, key: str, text: str, thread: str, sources: list[str]) -> None:
    """A memory as extraction writes it, with provenance."""
    value = memory_value(
        Candidate(kind="fact", text=text),
        user_id=user,
        thread_id=thread,
        source_ids=sources,
        source_time=None,
    )
    memory.store.put(user_memories(user), key, value)


def _seed(memory: Memory) -> None:
    thread = memory.thread("t1", user_id="maya")
    thread.add_messages(
        [
            {"role": "user", "content": "I live in Paris near the canal.", "id": "a1"},
            {"role": "assistant", "content": "Paris, noted.", "id": "a2"},
        ]
    )
    _extracted(memory, "maya", "mem-paris", "Maya lives in Paris", "t1", ["a1"])


def test_undo_removes_what_a_load_added_and_nothing_else(memory: Memory) -> None:
    _seed(memory)
    before = _snapshot(memory)
    stats_before = memory.store.stats()  # type: ignore[attr-defined]
    with begin_ingestion(memory, kind="load", source="crm.jsonl") as ing:
        ing.add_messages(
            "t1",
            [
                {"role": "user", "content": "I moved to Lyon, zebra street.", "id": "b1"},
                {"role": "assistant", "content": "Lyon, noted.", "id": "b2"},
                {"role": "user", "content": "I live in Paris near the canal.", "id": "a1"},  # held already
            ],
            user_id="maya",
        )
        ing.add_messages(
            "t2", [{"role": "user", "content": "zebra stripes all day", "id": "c1"}], user_id="maya"
        )
        ing.add_memories(
            "maya", ["collects zebra figurines", {"text": "prefers email", "kind": "preference"}]
        )
    # What happened after the load, from its messages: an extraction superseded Paris with Lyon.
    _extracted(memory, "maya", "mem-lyon", "Maya lives in Lyon", "t1", ["b1"])
    paris = memory.store.get(user_memories("maya"), "mem-paris")
    assert paris is not None
    memory.store.put(
        user_memories("maya"),
        "mem-paris",
        {**paris.value, "valid": False, "status": "superseded", "superseded_by": "mem-lyon"},
    )
    # A summary and a card built on the loaded messages.
    assert memory.get_thread("t1").get_summary().covered_count == 4
    assert "Lyon" in memory.get_thread("t1").get_context_card(max_recent_messages=0).content
    entry = get_ingestion(memory, ing.id)
    assert entry.state == "done" and entry.added == {"messages": 3, "memories": 2}
    assert entry.threads == {"t1": False, "t2": True}

    report = undo_ingestion(memory, last=True)

    assert (report.messages, report.memories, report.memories_restored) == (3, 3, 1)
    assert (report.threads_removed, report.summaries_stale, report.runs) == (1, 1, 1)
    assert _snapshot(memory) == before  # the Paris memory is valid again, exactly as it was
    stats = memory.store.stats()  # type: ignore[attr-defined]
    assert stats["vectors"] == stats_before["vectors"]  # the messages' and memories' vectors went with them
    assert stats["items"] == stats_before["items"] + 2  # the journal entry, and the stale summary revision
    assert not memory.search("zebra", user_id="maya") and not memory.search("zebra", thread_id="t1")
    thread = memory.get_thread("t1")
    assert [(m.id, m.seq) for m in thread.messages()] == [("a1", 0), ("a2", 1)]
    summary = thread.get_summary()
    assert summary.covered_count == 2 and "Lyon" not in summary.text
    card = thread.get_context_card(max_recent_messages=0).content
    assert "Lyon" not in card and "zebra" not in card
    with pytest.raises(NotFoundError):
        memory.get_thread("t2")
    assert get_ingestion(memory, ing.id).state == "undone"
    assert undo_ingestion(memory, ing.id) == report  # again: nothing more, the same totals
    with pytest.raises(NotFoundError, match="no ingestion left"):
        undo_ingestion(memory, last=True)


def test_an_erased_user_leaves_no_id_in_the_ingestion_journal(db_url: str) -> None:
    """The journal names the threads and users a load touched; after `forget --user` none of the erased
    user's names is left there (an entry naming only them goes), and another user's part still undoes."""
    from remem.erasure import erase

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        with begin_ingestion(memory, kind="load", source="crm.jsonl") as both:
            both.add_messages(
                "maya-chat", [{"role": "user", "content": "maya likes kites", "id": "m1"}], user_id="maya"
            )
            both.add_messages(
                "bob-chat", [{"role": "user", "content": "bob likes boats", "id": "b1"}], user_id="bob"
            )
        with begin_ingestion(memory, kind="load", source="maya.jsonl") as only_maya:
            only_maya.add_messages(
                "maya-notes", [{"role": "user", "content": "a note", "id": "m2"}], user_id="maya"
            )
            only_maya.add_memories("maya", ["prefers email"])
        journal = json.dumps([e.to_value() for e in list_ingestions(memory)])
        assert "maya" in journal  # what the check below would miss if the journal never named her

    erase(db_url, user_id="maya")

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        entries = list_ingestions(memory)
        assert "maya" not in json.dumps([e.to_value() for e in entries])
        assert [e.id for e in entries] == [both.id]  # the load that named only maya is gone whole
        assert entries[0].threads == {"bob-chat": True} and entries[0].users == []
        assert undo_ingestion(memory, both.id).messages == 1
        with pytest.raises(NotFoundError):
            memory.get_thread("bob-chat")


def test_messages_said_after_the_load_stay_in_order(memory: Memory) -> None:
    _seed(memory)
    with begin_ingestion(memory, kind="load") as ing:
        ing.add_messages("t1", [{"role": "user", "content": f"loaded {n}", "id": f"b{n}"} for n in range(3)])
    thread = memory.get_thread("t1")
    thread.add_messages([{"role": "user", "content": "said later", "id": "d1"}])
    undo_ingestion(memory, ing.id)
    assert [(m.id, m.seq) for m in thread.messages()] == [("a1", 0), ("a2", 1), ("d1", 2)]
    assert thread.info().message_count == 3 and thread.info().last_user_seq == 2
    assert thread.messages(last=1)[0].id == "d1"
    assert memory.search("said later", thread_id="t1")[0].id == "d1"
    thread.add_messages([{"role": "user", "content": "said later", "id": "d1"}])  # a retry adds nothing
    assert [m.id for m in thread.messages()] == ["a1", "a2", "d1"]


def test_a_load_killed_half_way_is_undone_the_same_way(memory: Memory) -> None:
    _seed(memory)
    before = _snapshot(memory)
    ing = begin_ingestion(memory, kind="load")
    ing.add_messages("t3", [{"role": "user", "content": "half a load", "id": "h1"}], user_id="maya")
    # (never closed: the process died)
    assert get_ingestion(memory, ing.id).state == "open"
    assert undo_ingestion(memory, last=True).messages == 1
    assert _snapshot(memory) == before


def test_refusals_say_what_to_do(memory: Memory) -> None:
    with pytest.raises(RememUsageError, match=r"--id ID \| --last"):
        undo_ingestion(memory)
    with pytest.raises(NotFoundError, match="remem ingest list"):
        undo_ingestion(memory, "ing-nope")
    with (
        begin_ingestion(memory, kind="load") as ing,
        pytest.raises(RememUsageError, match="list of messages"),
    ):
        ing.add_messages("t1", {"role": "user", "content": "x"})  # type: ignore[arg-type]
    with pytest.raises(RememUsageError, match="memory 0"):
        ing.add_memories("maya", [{"text": ""}])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["before", "loaded", "after"]), min_size=1, max_size=12))
def test_kept_messages_are_the_others_in_their_order(tmp_path: Path, plan: list[str]) -> None:
    """Whatever interleaving of turns and a load: after the undo the thread is the others, numbered 0..n-1."""
    with Memory.from_url("memory://", settings=SETTINGS) as memory:
        thread = memory.thread("t", user_id="u")
        ing = begin_ingestion(memory, kind="load")
        for n, when in enumerate(plan):
            message = {"role": "user" if n % 2 else "assistant", "content": f"turn {n}", "id": f"m{n}"}
            if when == "loaded":
                ing.add_messages("t", [message])
            else:
                thread.add_messages([message])
        ing.close()
        undo_ingestion(memory, ing.id)
        kept = [f"m{n}" for n, when in enumerate(plan) if when != "loaded"]
        assert [(m.id, m.seq) for m in thread.messages()] == [(i, n) for n, i in enumerate(kept)]
        assert not any(m.metadata.get(MESSAGE_TAG) for m in thread.messages())
        last_user = max((n for n, i in enumerate(kept) if int(i[1:]) % 2), default=-1)
        assert thread.info().last_user_seq == last_user


# ---------------------------------------------------------------- killed mid-undo, in a real process

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import remem.ingestion
    from remem.cli import main

    point = sys.argv[1]

    def hook(step):
        if step == point:
            os.kill(os.getpid(), signal.SIGKILL)

    remem.ingestion._on_step = hook
    main(sys.argv[2:], prog_name="remem")
    """
)


def _remem(*args: str, point: str = "none") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REMEM_EMBEDDER": "fake"}
    return subprocess.run(
        [sys.executable, "-c", _CHILD, point, *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize("point", ["thread:t1", "thread:t2", "user:maya"])
def test_an_undo_killed_at_a_step_is_finished_by_the_next(db_url: str, tmp_path: Path, point: str) -> None:
    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        _seed(memory)
        before = _snapshot(memory)
        with begin_ingestion(memory, kind="load") as ing:
            ing.add_messages("t1", [{"role": "user", "content": "I moved to Lyon.", "id": "b1"}])
            ing.add_messages("t2", [{"role": "user", "content": "zebra day", "id": "c1"}], user_id="maya")
            ing.add_memories("maya", ["collects zebra figurines"])
        ingestion_id = ing.id

    killed = _remem("ingest", "undo", "--id", ingestion_id, "--db", db_url, point=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        entry = get_ingestion(memory, ingestion_id)
        assert entry.state == "undoing" and entry.undo["done"][-1] == point

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        report = undo_ingestion(memory, last=True)  # the one left undoing
        assert (report.ingestion_id, report.messages, report.memories) == (ingestion_id, 2, 1)
        assert (report.threads_removed, report.runs) == (1, 2)
        assert _snapshot(memory) == before
        assert [e.state for e in list_ingestions(memory)] == ["undone"]


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"REMEM_EMBEDDER": "fake"})


def test_the_cli_loads_lists_undoes_and_refuses_clearly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'remem.db'}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"thread_id": "t1", "role": "user", "content": "x"}\nnot json\n', encoding="utf-8")
    result = _cli("ingest", "load", str(bad), "--db", url)
    assert result.exit_code == 2 and "bad.jsonl:2 is not JSON" in result.output
    bad.write_text('{"thread_id": "t1", "role": "robot", "content": "x"}\n', encoding="utf-8")
    result = _cli("ingest", "load", str(bad), "--db", url)
    assert result.exit_code == 2 and "bad.jsonl:1: message 1 has role 'robot'" in result.output
    assert not (tmp_path / "remem.db").exists()  # refused before anything was written
    good = tmp_path / "good.jsonl"
    rows = [
        {"thread_id": "t1", "user_id": "maya", "role": "user", "content": "I moved to Lyon.", "id": "m1"},
        {"user_id": "maya", "memory": "prefers email"},
    ]
    good.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    loaded = _cli("ingest", "load", str(good), "--db", url)
    assert loaded.exit_code == 0 and "1 message(s) in 1 thread(s), 1 memory(ies)" in loaded.output
    listed = _cli("ingest", "list", "--db", url, "--json")
    assert listed.exit_code == 0, listed.output
    (entry,) = json.loads(listed.output)["ingestions"]
    assert entry["state"] == "done" and entry["messages"] == 1 and entry["source"] == "good.jsonl"
    assert _cli("ingest", "undo", "--db", url).exit_code == 2  # neither --id nor --last
    undone = _cli("ingest", "undo", "--id", entry["id"], "--db", url, "--json")
    assert undone.exit_code == 0 and json.loads(undone.output)["memories removed"] == "1"
    assert "undone" in _cli("ingest", "list", "--db", url).output
    with open_queue(url) as queue:  # the load's summary refresh went with its thread
        assert queue.jobs() == []
    again = _cli("ingest", "undo", "--last", "--db", url)
    assert again.exit_code == 1 and "no ingestion left to undo" in again.output
    missing = _cli("ingest", "list", "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 1 and "no database" in missing.output
