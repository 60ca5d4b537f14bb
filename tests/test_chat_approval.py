"""``remem chat`` asks yes/no when a model call waits for approval, driven as a real process on real stdin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage

from remem.agent import thread_config
from remem.checkpoint import checkpointer_from_url
from remem.usage import open_ledger

ROOT = Path(__file__).resolve().parent.parent


def _chat(url: str, stdin: str, agent: str = "approval_agent") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "REMEM_DATABASE_URL": url,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "NO_COLOR": "1",
    }
    env.pop("REMEM_CONFIG", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "remem.cli",
            "chat",
            "--thread",
            "t",
            "--agent",
            f"tests.chat_agents:{agent}",
        ],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def _messages(url: str) -> list[tuple[str, str]]:
    with checkpointer_from_url(url) as saver:
        checkpoint = saver.get_tuple(thread_config("t"))
        assert checkpoint is not None
        messages = checkpoint.checkpoint["channel_values"]["messages"]
    return [(type(m).__name__, str(m.text)) for m in messages]


def _calls(url: str) -> int:
    with open_ledger(url) as ledger:
        return ledger.spent(thread_id="t").calls


def test_yes_sends_the_call_and_no_ends_the_turn_keeping_every_message(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    done = _chat(url, "hello there\ny\nsecond question\nn\n/exit\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("needs approval: about") == 2 and "Send it?" in out
    assert "assistant> Reply to: hello there" in out
    assert "was not approved" in out and "Reply to: second question" not in out
    assert _messages(url) == [
        (HumanMessage.__name__, "hello there"),
        (AIMessage.__name__, "Reply to: hello there"),
        (HumanMessage.__name__, "second question"),
        (AIMessage.__name__, _messages(url)[3][1]),
    ]
    assert "not approved" in _messages(url)[3][1]
    assert _calls(url) == 1  # only the approved call was sent


def test_a_question_left_unanswered_is_asked_again_by_the_next_chat(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    first = _chat(url, "remember me\n")  # the input ends at the yes/no question
    assert first.returncode == 0, first.stderr
    assert "still waits for approval" in first.stdout
    assert _calls(url) == 0 and _messages(url) == [(HumanMessage.__name__, "remember me")]

    second = _chat(url, "yes\n/exit\n")
    assert second.returncode == 0, second.stderr
    assert "needs approval" in second.stdout.split("you>")[0]  # asked before the first prompt
    assert _calls(url) == 1
    assert _messages(url) == [
        (HumanMessage.__name__, "remember me"),
        (AIMessage.__name__, "Reply to: remember me"),
    ]


def test_a_call_over_a_budget_asks_naming_the_budget(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    done = _chat(url, "hello there\ny\nsecond question\nn\n/exit\n", agent="over_budget_agent")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("over the call_token_budget of 1 tokens") == 2
    assert (
        "assistant> Reply to: hello there" in done.stdout and "Reply to: second question" not in done.stdout
    )
    assert _calls(url) == 1  # the approved call only
