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
