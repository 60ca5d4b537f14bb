"""``remem`` as a unix tool, in a real process: a closed pipe, a module in the current directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn


def _remem(*args: str, cwd: Path, **kw: object) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "REMEM_EMBEDDER": "fake"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "remem"), *args],  # the console script: no "" on sys.path
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with checkpointer_from_url(url) as saver:
        agent = build_agent(ScriptedChatModel(default="ok"), strategy="filter", checkpointer=saver)
        run_turn(agent, "t", "hello")
    read, write = os.pipe()
    os.close(read)  # `| head -1` that has already exited: the first write meets a broken pipe
    try:
        done = _remem("export", "t", "--db", url, cwd=tmp_path, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert done.stderr == b"", done.stderr.decode()
    assert done.returncode != 0


def test_chat_agent_loads_a_module_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "myagent_here.py").write_text(
        "from remem import ScriptedChatModel, build_agent\n\n"
        "def build(checkpointer, settings):\n"
        "    return build_agent(ScriptedChatModel(default='from my module'), strategy='filter',\n"
        "                       checkpointer=checkpointer, settings=settings)\n"
    )
    url = f"sqlite:///{tmp_path / 'app.db'}"
    done = _remem(
        "chat",
        "--agent",
        "myagent_here:build",
        "--thread",
        "t",
        "--db",
        url,
        cwd=tmp_path,
        input=b"hi\n/exit\n",
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"from my module" in done.stdout


def test_chat_shows_the_summary_the_card_and_the_usage(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from remem.cli import main
    from tests.openai_server import openai_compatible_server

    url = f"sqlite:///{tmp_path / 'app.db'}"
    replies = ["Noted, Priya.", "Biscuit is a fine name.", "Green tea, then.", "Osaka in April."]
    with openai_compatible_server(replies) as server:
        env = {
            "REMEM_LLM_MODEL": "m",
            "REMEM_LLM_BASE_URL": server.url,
            "REMEM_LLM_MAX_RETRIES": "0",
            "REMEM_EMBEDDER": "fake",
        }
        said = "My name is Priya\nMy dog is Biscuit\nI drink green tea\nI visit Osaka\n"
        result = CliRunner().invoke(
            main,
            ["chat", "--thread", "c", "--strategy", "filter", "--db", url],
            input=said + "/help\n/summary\n/card\n/usage\n/exit\n",
            env=env,
        )
    assert result.exit_code == 0, result.output
    help_line = next(line for line in result.output.splitlines() if line.startswith("commands: "))
    assert all(name in help_line for name in ("/summary:", "/card:", "/usage:"))
    assert "unknown command" not in result.output
    out = result.output
    assert "- User: My dog is Biscuit" in out  # /summary
    assert "<context_card>" in out and "</context_card>" in out  # /card
    assert "│ c      │ 4    │ 1     │" in out and "│ total  │" in out  # /usage, one row per turn
    assert "Error" not in out, out


def test_the_demo_keeps_its_table_whole_and_names_its_columns(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from remem.cli import main

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = CliRunner().invoke(main, ["demo", "--turns", "2", "--db", url], env={"REMEM_EMBEDDER": "fake"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("turn  in state"))
    assert lines[header + 1].split()[0] == "1" and lines[header + 2].split()[0] == "2"  # no warning between
    warning = next(i for i, line in enumerate(lines) if "has no price" in line)
    assert warning > next(i for i, line in enumerate(lines) if line == "final state")  # said after the table
    assert "measure" in lines[next(i for i, line in enumerate(lines) if line == "final state") + 2]
