"""Every ``remem`` command against hostile stored strings and broken files: literal output, one-line errors.

The commands come from the click group (tests/cli_commands.py), so a new command is run here too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from remem.cli import main
from tests.cli_commands import (
    AGENT_THREAD,
    ARGS,
    LONG,
    MEMORY_THREAD,
    RAW_CONTROLS,
    TOOL,
    WRITING,
    all_commands,
    command,
    run,
    seed,
)

COMMANDS = all_commands()
READS = [p for p in COMMANDS if p not in WRITING]


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("REMEM_") or name == "OPENAI_API_KEY":
            monkeypatch.delenv(name)


def _assert_clean(result: Result) -> None:
    out = result.output
    assert "Traceback" not in out, out
    for raw in RAW_CONTROLS:
        assert raw not in out, (raw, out)


def _assert_one_line_error(result: Result, code: int | None = None) -> None:
    _assert_clean(result)
    assert result.exit_code in ((1, 2) if code is None else (code,)), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr


def test_every_command_takes_db_and_every_reading_command_takes_json() -> None:
    assert len(COMMANDS) >= 13
    for path in COMMANDS:
        options = {opt for param in command(path).params for opt in getattr(param, "opts", [])}
        assert "--db" in options, path
        if path not in WRITING:
            assert "--json" in options, path
    assert set(ARGS) <= set(COMMANDS)  # no stale entry


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    seed(url)
    return url


def test_every_command_shows_hostile_strings_literally(hostile: str) -> None:
    outputs = {}
    for path in COMMANDS:
        result = run(path, hostile)
        _assert_clean(result)
        assert result.exit_code == 0, (path, result.output)
        outputs[path] = result.output
    state = outputs[("state",)]
    assert "[red]alert[/red] and [bold]bold[/b] :smile:" in state  # neither styled nor dropped
    assert "\\x1b[31mred" in state and "\\x07" in state  # control characters shown, not sent
    assert f'→ {TOOL}({{"q": "[red]x[/red]"}})' in state and "assistant→tools" in state  # the tool call
    assert f"← {TOOL} [call_1] [b]result[/b]" in state  # and its result
    assert "TAILMARK" not in state and "…" in state  # long text is cut in tables ...
    assert AGENT_THREAD in outputs[("threads",)] and MEMORY_THREAD in outputs[("threads",)]
    assert f"history of {AGENT_THREAD}" in outputs[("history",)]
    assert AGENT_THREAD in outputs[("checkpoints", "stats")]
    # card, summary and search read the agent's thread from the checkpoints and say so
    for path in [("card",), ("summary",), ("search",)]:
        assert "read from checkpoints in sqlite:///" in outputs[path], outputs[path]
    assert "unknown command /nonsense; nothing was sent to the model" in outputs[("chat",)]
    assert "/help" in outputs[("chat",)]


def test_full_shows_whole_contents(hostile: str) -> None:
    result = run(("state",), hostile, env=None)
    assert "TAILMARK" not in result.output
    full = CliRunner().invoke(main, ["state", AGENT_THREAD, "--last", "0", "--full", "--db", hostile])
    assert full.exit_code == 0 and "TAILMARK" in full.output
    searched = CliRunner().invoke(
        main,
        ["search", "long word", "--thread", MEMORY_THREAD, "--full", "--db", hostile],
        env={"REMEM_EMBEDDER": "fake"},
    )
    assert searched.exit_code == 0 and "TAILMARK" in searched.output, searched.output


def test_every_reading_command_prints_json_with_the_stored_strings_intact(hostile: str) -> None:
    from tests.cli_commands import argv

    for path in READS:
        result = CliRunner().invoke(main, [*argv(path, hostile), "--json"], env={"REMEM_EMBEDDER": "fake"})
        assert result.exit_code == 0, (path, result.output)
        data = json.loads(result.stdout)
        assert isinstance(data, dict)
    state = json.loads(
        CliRunner().invoke(main, ["state", AGENT_THREAD, "--last", "0", "--json", "--db", hostile]).stdout
    )
    contents = [m["content"] for m in state["messages"]]
    assert LONG in contents and any("\x1b[31mred" in c for c in contents)  # whole, exact
    calls = [m["tool_calls"] for m in state["messages"] if "tool_calls" in m]
    assert calls == [[{"name": TOOL, "args": {"q": "[red]x[/red]"}, "id": "call_1"}]]


def test_card_summary_search_on_a_memory_thread_with_hostile_ids(hostile: str) -> None:
    for path in [("card",), ("summary",), ("search",)]:
        result = run(path, hostile, thread=MEMORY_THREAD)
        _assert_clean(result)
        assert result.exit_code == 0, (path, result.output)
        assert "read from memory store in sqlite:///" in result.output
    searched = run(("search",), hostile, thread=MEMORY_THREAD)
    assert "[/]m1" in searched.output and "[/]f1" in searched.output  # ids printed as stored
    assert "[red]alert[/red]" in searched.output
    summary = run(("summary",), hostile, thread=MEMORY_THREAD)
    assert f"thread {MEMORY_THREAD}: no summary stored yet" in summary.output
    refreshed = CliRunner().invoke(
        main, ["summary", MEMORY_THREAD, "--refresh", "--db", hostile], env={"REMEM_EMBEDDER": "fake"}
    )
    _assert_clean(refreshed)
    assert refreshed.exit_code == 0, refreshed.output
    assert f"thread {MEMORY_THREAD}  revision 1  covers 3 messages ([/]m1 .. m3)" in refreshed.output


# ------------------------------------------------------------------ broken files


def test_a_corrupt_file_gives_one_line_errors_and_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    garbage = b"this is not a SQLite database\n" * 200
    path.write_bytes(garbage)
    for cmd in COMMANDS:
        result = run(cmd, f"sqlite:///{path}")
        if cmd == ("config",):
            assert result.exit_code == 0
            continue
        _assert_one_line_error(result, 1)
        assert path.read_bytes() == garbage, cmd
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.db"]


def test_a_missing_file_is_an_error_and_reads_create_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo' / 'remem.db'}"
    for cmd in COMMANDS:
        if cmd in {("chat",), ("demo",)}:
            continue  # these start a database where there is none: that is their job
        result = run(cmd, url)
        if cmd == ("config",):
            assert result.exit_code == 0
            continue
        _assert_one_line_error(result, 1)
        assert "there is no database at" in result.stderr, result.stderr
        assert not (tmp_path / "typo").exists(), cmd
    for cmd in (("card",), ("summary",)):  # not even to write a new summary revision
        result = CliRunner().invoke(main, [*cmd, AGENT_THREAD, "--refresh", "--db", url])
        _assert_one_line_error(result, 1)
        assert not (tmp_path / "typo").exists(), cmd


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` made read-only: chmod for a normal user, the immutable flag for root (chmod binds no root)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o600)
        return
    if shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: cannot make a file read-only")
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this filesystem has no immutable flag ({made.stderr.strip()})")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_file_can_be_read_and_writes_fail_in_one_line(hostile: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.db"
    # Fold the write-ahead log into the file, as a copied or backed-up database would be.
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    before = path.read_bytes()
    with _read_only(path):
        for cmd in COMMANDS:
            result = run(cmd, hostile)
            if cmd in WRITING:
                _assert_one_line_error(result, 1)
            else:
                _assert_clean(result)
                assert result.exit_code == 0, (cmd, result.output)
    assert path.read_bytes() == before


def test_reading_commands_leave_every_byte_of_the_database_as_it_was(hostile: str, tmp_path: Path) -> None:
    def files() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(tmp_path.iterdir()) if p.name.startswith("hostile")}

    before = files()
    assert "hostile.db" in before
    for path in READS:
        for thread in (AGENT_THREAD, MEMORY_THREAD):
            result = run(path, hostile, thread=thread)
            if thread == MEMORY_THREAD and path in {("state",), ("history",)}:  # no checkpoints: said so
                assert result.exit_code == 1 and "is the memory client's" in result.stderr, result.output
            else:
                assert result.exit_code == 0, (path, result.output)
    assert files() == before
