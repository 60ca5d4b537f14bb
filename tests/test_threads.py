"""Threads by URL: parsing, clear errors, and threads that survive a process restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, list_threads, run_turn
from remem._url import parse_database_url
from remem.checkpoint import acheckpointer_from_url
from remem.errors import ConfigError, NotFoundError, StorageError
from tests import matrix

EXAMPLE = Path(__file__).parent.parent / "examples" / "persistent_chat.py"


def chat_in_new_process(db: str, thread: str, message: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--db", db, "--thread", thread, message],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(
    ("url", "kind", "target"),
    [
        ("memory://", "memory", ""),
        ("sqlite:///data/remem.db", "sqlite", "data/remem.db"),
        ("sqlite:////tmp/x.db", "sqlite", "/tmp/x.db"),
        ("postgresql://u@h:5432/db", "postgres", "postgresql://u@h:5432/db"),
    ],
)
def test_urls_name_their_backend(url: str, kind: str, target: str) -> None:
    parsed = parse_database_url(url)
    assert (parsed.kind, parsed.target) == (kind, target)


@pytest.mark.parametrize("url", ["", "mysql://x", "sqlite://relative.db", "sqlite:///", "redis://localhost"])
def test_bad_urls_list_the_accepted_forms(url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///PATH"):
        parse_database_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://someone:s3cret@127.0.0.1:1/nowhere",
        "postgresql://127.0.0.1:1/nowhere?user=u&password=s3cret",
    ],
)
def test_unreachable_postgres_is_a_storage_error_without_the_password(url: str) -> None:
    with (
        pytest.raises(StorageError, match="check that the server is running") as info,
        checkpointer_from_url(url),
    ):
        pass
    assert "s3cret" not in str(info.value) and "someone" not in str(info.value)
    assert "127.0.0.1:1/nowhere" in str(info.value)


async def test_async_opening_fails_the_same_clear_way(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:1/nowhere"):
        async with acheckpointer_from_url("postgresql://u:pw@127.0.0.1:1/nowhere"):
            pass
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match="check the path"):
        async with acheckpointer_from_url(f"sqlite:///{blocker}/sub/remem.db"):
            pass


def test_reading_commands_do_not_create_databases(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "x.db"
    with (
        pytest.raises(NotFoundError, match="there is no database at"),
        checkpointer_from_url(f"sqlite:///{missing}", create=False),
    ):
        pass
    assert not missing.parent.exists()


def test_unwritable_sqlite_path_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with (
        pytest.raises(StorageError, match="check the path"),
        checkpointer_from_url(f"sqlite:///{blocker}/sub/remem.db"),
    ):
        pass


@pytest.mark.parametrize("backend", matrix.backend_params("sqlite", "postgres"))
def test_a_thread_survives_a_process_restart(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = f"sqlite:///{tmp_path / 'chat.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    first = chat_in_new_process(db, "t1", "My name is Ada and I collect barometers.")
    assert first["model_input"] == [["human", "My name is Ada and I collect barometers."]]
    second = chat_in_new_process(db, "t1", "What did I just say?")
    texts = [text for _, text in second["model_input"]]
    assert texts[0] == "My name is Ada and I collect barometers."
    assert texts[-1] == "What did I just say?"
    other = chat_in_new_process(db, "t2", "Hello?")
    assert len(other["model_input"]) == 1  # threads do not leak into each other
    with checkpointer_from_url(db) as saver:
        assert list_threads(saver) == ["t2", "t1"]


@pytest.mark.postgres
async def test_async_checkpointers_open_each_backend(tmp_path: Path, pg_url: str) -> None:
    for url in ("memory://", f"sqlite:///{tmp_path / 'a.db'}", pg_url):
        async with acheckpointer_from_url(url) as saver:
            agent = build_agent(ScriptedChatModel(default="hi"), strategy="filter", checkpointer=saver)
            result = await agent.ainvoke(
                {"messages": [("user", "hello")]}, {"configurable": {"thread_id": "a"}}
            )
            assert result["messages"][-1].text == "hi"


def test_sqlite_threads_are_readable_by_a_second_saver(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with checkpointer_from_url(url) as saver:
        run_turn(build_agent(ScriptedChatModel(), strategy="filter", checkpointer=saver), "t", "hi")
    with checkpointer_from_url(url) as saver:
        assert list_threads(saver) == ["t"]


async def test_arun_turn_on_async_sqlite(tmp_path: Path) -> None:
    from remem import arun_turn

    model = ScriptedChatModel(default=lambda messages: f"{len(messages)} messages")
    async with acheckpointer_from_url(f"sqlite:///{tmp_path / 'async.db'}") as saver:
        agent = build_agent(model, strategy="filter", checkpointer=saver)
        assert (await arun_turn(agent, "t", "one")).text == "1 messages"
        assert (await arun_turn(agent, "t", "two")).text == "3 messages"


def test_in_memory_threads_are_listed_most_recently_written_first() -> None:
    with checkpointer_from_url("memory://") as saver:
        agent = build_agent(ScriptedChatModel(), strategy="filter", checkpointer=saver)
        for thread in ("a", "b", "a"):
            run_turn(agent, thread, "hello")
        assert list_threads(saver) == ["a", "b"]
