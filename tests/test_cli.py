"""The remem command: thin commands, readable output, clean errors with exit codes 1 and 2."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from remem import checkpointer_from_url
from remem.cli import main
from tests.openai_server import openai_compatible_server


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)  # no remem.toml, default database under tmp_path
    for name in (
        "REMEM_LLM_MODEL",
        "REMEM_LLM_BASE_URL",
        "REMEM_LLM_API_KEY",
        "OPENAI_API_KEY",
        "REMEM_DATABASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_demo_runs_offline_and_recalls_the_planted_facts(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".remem" / "remem.db").exists()  # the default SQLite file
    assert re.search(r"facts recalled\s*│\s*9/9", result.output)
    rows = [line for line in result.output.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+\s+\d+", line)]
    assert len(rows) == 65
    seen = int(re.search(r"tokens the model saw\s*│\s*(\d+)", result.output).group(1))  # type: ignore[union-attr]
    full = int(re.search(r"tokens with full history\s*│\s*(\d+)", result.output).group(1))  # type: ignore[union-attr]
    assert seen < full
    thread = re.search(r"remem state (demo-\S+)", result.output).group(1)  # type: ignore[union-attr]

    listed = runner.invoke(main, ["threads"])
    assert thread in listed.output
    state = runner.invoke(main, ["state", thread, "--last", "3"])
    assert state.exit_code == 0, state.output
    assert "Biscuit" in state.output  # in the rolling summary
    assert "call_model" in state.output and "offline-responder" in state.output
    history = runner.invoke(main, ["history", thread, "--limit", "5"])
    assert history.exit_code == 0 and history.output.count("loop") >= 4


def test_state_time_travel_shows_an_earlier_checkpoint(runner: CliRunner) -> None:
    runner.invoke(main, ["demo"])
    thread = re.search(r"demo-\S+", runner.invoke(main, ["threads"]).output).group(0)  # type: ignore[union-attr]
    from remem import checkpointer_from_url, thread_history
    from remem.inspection import reader_graph

    with checkpointer_from_url("sqlite:///.remem/remem.db") as saver:
        rows = thread_history(reader_graph(saver), thread, limit=None)
    first_loop = next(r for r in rows if r.step == 1)
    state = runner.invoke(main, ["state", thread, "--checkpoint", first_loop.checkpoint_id, "--last", "0"])
    assert "messages in state: 2" in state.output


def test_config_masks_secrets(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config"], env={"REMEM_LLM_API_KEY": "sk-abcdefghijkl"})
    assert result.exit_code == 0
    assert "abcdefghijkl" not in result.output and "llm_api_key" in result.output


def test_chat_without_a_model_says_how_to_configure_one(runner: CliRunner) -> None:
    result = runner.invoke(main, ["chat"], input="hello\n")
    assert result.exit_code == 2
    assert "Set REMEM_LLM_MODEL" in result.output and "Traceback" not in result.output


def test_chat_talks_and_inspects(runner: CliRunner) -> None:
    with openai_compatible_server(["Hi, I'm listening.", "You said hello."]) as server:
        env = {"REMEM_LLM_MODEL": "m", "REMEM_LLM_BASE_URL": server.url, "REMEM_LLM_MAX_RETRIES": "0"}
        result = runner.invoke(
            main,
            ["chat", "--thread", "cli", "--strategy", "filter"],
            input="hello\nwhat did I say?\n/state\n/history\n/exit\n",
            env=env,
        )
    assert result.exit_code == 0, result.output
    assert "Hi, I'm listening." in result.output and "You said hello." in result.output
    assert "messages in state: 4" in result.output
    assert "history of cli" in result.output
    assert "bye: 4 messages" in result.output


def test_chat_survives_bad_input_and_keeps_going(runner: CliRunner) -> None:
    with openai_compatible_server(["ok"]) as server:
        env = {"REMEM_LLM_MODEL": "m", "REMEM_LLM_BASE_URL": server.url, "REMEM_MAX_MESSAGE_CHARS": "20"}
        result = runner.invoke(
            main, ["chat"], input="this line is far too long for the limit\nshort\n/exit\n", env=env
        )
    assert result.exit_code == 0, result.output
    assert "over the limit of 20" in result.output
    assert "assistant> ok" in result.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["threads", "--db", "mysql://nope"], 2, "unsupported database URL"),
        (["threads", "--db", "postgresql://x@127.0.0.1:1/none"], 1, "cannot connect to PostgreSQL"),
        (["state", "no-such-thread", "--db", "memory://"], 1, "holds no checkpoints"),
        (["demo", "--strategy", "nonsense"], 2, "Invalid value"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    runner: CliRunner, args: list[str], code: int, message: str
) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == code, result.output
    assert message in result.output and "Traceback" not in result.output


def test_bad_setting_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config"], env={"REMEM_STRATEGY": "everything"})
    assert result.exit_code == 2
    assert "must be one of filter, delete, trim, summary" in result.output


def test_stored_markup_is_shown_as_text_not_read_as_markup(runner: CliRunner) -> None:
    from remem import ScriptedChatModel, build_agent, run_turn

    with checkpointer_from_url("sqlite:///m.db") as saver:
        agent = build_agent(ScriptedChatModel(default="[bold]ok[/b]"), strategy="filter", checkpointer=saver)
        run_turn(agent, "t", "close this [/b] and [red]that")
    result = runner.invoke(main, ["state", "t", "--db", "sqlite:///m.db"])
    assert result.exit_code == 0, result.output
    assert "close this [/b] and [red]that" in result.output and "[bold]ok[/b]" in result.output


def test_chat_state_on_a_new_thread_is_an_error_line_not_an_exit(runner: CliRunner) -> None:
    with openai_compatible_server(["ok"]) as server:
        env = {"REMEM_LLM_MODEL": "m", "REMEM_LLM_BASE_URL": server.url}
        result = runner.invoke(main, ["chat", "--thread", "fresh"], input="/state\n/exit\n", env=env)
    assert result.exit_code == 0, result.output
    assert "does not exist" in result.output and "bye: 0 messages" in result.output


def test_reading_commands_refuse_a_missing_database_and_bad_limits(runner: CliRunner, tmp_path: Path) -> None:
    missing = runner.invoke(main, ["threads", "--db", f"sqlite:///{tmp_path / 'no' / 'x.db'}"])
    assert missing.exit_code == 1 and "there is no database" in missing.output
    assert not (tmp_path / "no").exists()
    runner.invoke(main, ["demo"])
    assert runner.invoke(main, ["history", "x", "--limit", "0"]).exit_code == 2


@pytest.mark.postgres
def test_postgres_urls_are_shown_without_credentials(runner: CliRunner, pg_url: str) -> None:
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    with checkpointer_from_url(pg_url):  # reading commands need the tables (they create none)
        pass
    result = runner.invoke(main, ["threads", "--db", url])
    assert result.exit_code == 0, result.output
    flat = result.output.replace("\n", "")  # the title wraps above a narrow table
    assert "hunter2" not in flat and "threads in postgresql://127.0.0.1:5432/" in flat


def test_files_the_commands_create_are_owner_only(runner: CliRunner, tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, which alone would give 0755 folders and 0644 files
    try:
        result = runner.invoke(main, ["demo", "--turns", "2"])
        assert result.exit_code == 0, result.output
        chat_db = tmp_path / "chats" / "c.db"
        runner.invoke(main, ["chat", "--db", f"sqlite:///{chat_db}"], input="/exit\n", env=_NO_CALL_MODEL)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / ".remem").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "chats").stat().st_mode) == 0o700
    made = [p for p in [*(tmp_path / ".remem").iterdir(), *(tmp_path / "chats").iterdir()]]
    assert any(p.name == "remem.db" for p in made) and any(p.name == "c.db" for p in made)
    for path in made:  # the database and its -wal / -shm files
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


_NO_CALL_MODEL = {"REMEM_LLM_MODEL": "m", "REMEM_LLM_BASE_URL": "http://127.0.0.1:9/v1"}


def test_unknown_remem_variables_are_warned_about_with_the_closest_name(runner: CliRunner) -> None:
    result = runner.invoke(main, ["config"], env={"REMEM_STRATEGIE": "trim"})
    assert result.exit_code == 0
    assert "Warning: REMEM_STRATEGIE is not a remem setting and is ignored; did you mean REMEM_STRATEGY?" in (
        result.stderr
    )


def test_chat_answers_slash_commands_itself_and_never_sends_them(runner: CliRunner) -> None:
    with openai_compatible_server(["ok"]) as server:
        env = {"REMEM_LLM_MODEL": "m", "REMEM_LLM_BASE_URL": server.url}
        result = runner.invoke(main, ["chat"], input="/help\n/helpp\n//etc is a path\n/exit\n", env=env)
        sent = [m["content"] for r in server.requests for m in r["messages"] if m["role"] == "user"]
    assert result.exit_code == 0, result.output
    assert "unknown command /helpp; nothing was sent to the model" in result.output
    assert result.output.count("commands: /state") == 2  # /help, and the answer to /helpp
    assert sent == ["/etc is a path"]  # only the message, with its escaping slash removed


def test_the_cli_imports_no_heavy_library_for_help() -> None:
    code = (
        "import sys\n"
        "from remem.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'langgraph', 'langchain_core', 'rich', 'psycopg', 'numpy', 'onnxruntime'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_demo_prints_the_follow_up_command_with_the_remem_it_ran(tmp_path: Path) -> None:
    remem = Path(sys.executable).parent / "remem"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEM_")}
    for path, expected in [("/usr/bin:/bin", str(remem)), (f"{remem.parent}:/usr/bin:/bin", "remem")]:
        done = subprocess.run(
            [str(remem), "demo", "--turns", "1"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**env, "PATH": path},
            check=True,
        )
        line = done.stdout.strip().splitlines()[-1]
        assert re.fullmatch(
            rf"Inspect it: {re.escape(expected)} state demo-\S+ +{re.escape(expected)} history demo-\S+", line
        ), line


def test_a_configured_key_of_any_shape_is_masked_wherever_it_would_be_printed(runner: CliRunner) -> None:
    key = "plainkey-without-a-known-prefix-42"
    with openai_compatible_server([f"the key is {key}"]) as server:
        env = {"REMEM_LLM_MODEL": "m", "REMEM_LLM_BASE_URL": server.url, "REMEM_LLM_API_KEY": key}
        chat = runner.invoke(main, ["chat"], input="say it\n/exit\n", env=env)
        shown = runner.invoke(main, ["config", "--json"], env=env)
    assert chat.exit_code == 0 and "the key is ***" in chat.output
    assert key not in chat.output and key not in shown.output
