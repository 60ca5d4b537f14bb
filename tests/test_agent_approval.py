"""remem's own agent asks for approval before a model call above ``approval_token_threshold`` /
``approval_cost_threshold``, as ``BudgetMiddleware`` does: on real SQLite files and PostgreSQL, with a
call-counting scripted model. A pause sends nothing; yes sends exactly the one call; no ends the turn with
a message, keeps every message, and the thread goes on; 0 means never."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.types import Command

from remem import ExtractiveSummarizer, Settings, build_agent, checkpointer_from_url, run_turn
from remem.agent import aresume_turn, arun_turn, resume_turn, thread_config
from remem.errors import ApprovalPendingError, NotFoundError
from remem.middleware import budget
from remem.testing import ScriptedChatModel
from remem.usage import open_ledger
from remem.usage._approval import Estimate, approved, is_refusal

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def saver(db_url: str) -> Iterator[Any]:
    with checkpointer_from_url(db_url) as opened:
        yield opened


def echo() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda messages: f"Reply to: {messages[-1].text}")


def agent_with(saver: Any, model: ScriptedChatModel, **settings: Any) -> Any:
    return build_agent(model, strategy="filter", checkpointer=saver, settings=Settings(**settings))


def paid_calls(db_url: str) -> int:
    with open_ledger(db_url) as ledger:
        return ledger.spent(thread_id="t").calls


def kept(agent: Any) -> list[tuple[str, str]]:
    messages = agent.get_state(thread_config("t")).values.get("messages", [])
    return [(type(m).__name__, str(m.text)) for m in messages]


def test_a_call_above_the_token_threshold_pauses_and_yes_sends_exactly_one_call(
    db_url: str, saver: Any
) -> None:
    model = echo()
    agent = agent_with(saver, model, approval_token_threshold=3)
    with pytest.raises(ApprovalPendingError, match="needs approval") as paused:
        run_turn(agent, "t", "hello there, model", user_id="maya")
    estimate = paused.value.estimate
    assert estimate["kind"] == "remem.approval" and estimate["input_tokens"] > 3
    assert (estimate["thread"], estimate["user"], estimate["turn"], estimate["model"]) == (
        "t",
        "maya",
        1,
        "scripted",
    )
    assert model.calls == [] and paid_calls(db_url) == 0  # nothing was sent
    assert kept(agent) == [("HumanMessage", "hello there, model")]

    reply = resume_turn(agent, "t", True, user_id="maya")
    assert reply.text == "Reply to: hello there, model"
    assert len(model.calls) == 1 and paid_calls(db_url) == 1
    assert kept(agent) == [
        ("HumanMessage", "hello there, model"),
        ("AIMessage", "Reply to: hello there, model"),
    ]
    with open_ledger(db_url) as ledger:
        assert [(r.turn, r.user_id) for r in ledger.events(thread_id="t")] == [(1, "maya")]


def test_no_ends_the_turn_with_a_message_sends_nothing_and_the_next_turn_works(
    db_url: str, saver: Any
) -> None:
    model = echo()
    agent = agent_with(saver, model, approval_token_threshold=3)
    with pytest.raises(ApprovalPendingError):
        run_turn(agent, "t", "first question")
    refused = resume_turn(agent, "t", False)
    assert is_refusal(refused) and "not approved" in refused.text and "nothing was sent" in refused.text
    assert model.calls == [] and paid_calls(db_url) == 0
    assert agent.get_state(thread_config("t")).next == ()  # the turn ended: nothing waits

    with pytest.raises(ApprovalPendingError) as paused:  # the next turn pauses too, and goes through
        run_turn(agent, "t", "second question")
    assert paused.value.estimate["turn"] == 2
    assert resume_turn(agent, "t", True).text == "Reply to: second question"
    assert len(model.calls) == 1 and paid_calls(db_url) == 1
    # The refusal is a note to the person, kept in the thread, never sent to the model.
    assert [m.text for m in model.calls[0]] == ["first question", "second question"]
    assert [kind for kind, _ in kept(agent)] == ["HumanMessage", "AIMessage", "HumanMessage", "AIMessage"]


def test_below_the_threshold_or_at_zero_nothing_pauses(db_url: str, saver: Any) -> None:
    model = echo()
    below = agent_with(saver, model, approval_token_threshold=100_000, approval_cost_threshold=100.0)
    assert run_turn(below, "t", "hi").text == "Reply to: hi"
    never = agent_with(saver, model, approval_token_threshold=0, approval_cost_threshold=0.0)
    assert run_turn(never, "t", "again " * 200).text.startswith("Reply to: again")
    assert len(model.calls) == 2 and paid_calls(db_url) == 2


def test_a_call_costing_more_than_the_cost_threshold_pauses(db_url: str, saver: Any) -> None:
    model = echo()
    agent = agent_with(
        saver, model, prices=(("scripted", 1000.0, 1000.0, None),), approval_cost_threshold=0.001
    )
    with pytest.raises(ApprovalPendingError) as paused:
        run_turn(agent, "t", "what does this cost?")
    cost = paused.value.estimate["cost"]
    assert cost is not None and cost > 0.001 and model.calls == []
    done = agent.invoke(
        Command(resume={"approved": True}), thread_config("t")
    )  # the middleware's answer form
    assert done["messages"][-1].text == "Reply to: what does this cost?"
    assert len(model.calls) == 1


def test_each_call_of_a_tool_loop_is_asked_for_and_no_completed_call_is_repeated(
    db_url: str, saver: Any
) -> None:
    seen: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        seen.append(key)
        return f"value of {key}"

    model = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "a"}, "id": "c1"}]), "a is 1"]
    )
    agent = build_agent(
        model,
        tools=[lookup],
        strategy="filter",
        checkpointer=saver,
        settings=Settings(approval_token_threshold=3),
    )
    with pytest.raises(ApprovalPendingError):
        run_turn(agent, "t", "what is a?")
    with pytest.raises(ApprovalPendingError) as again:  # the call answering the tool result asks again
        resume_turn(agent, "t", True)
    assert again.value.estimate["turn"] == 1
    assert len(model.calls) == 1 and seen == ["a"] and paid_calls(db_url) == 1
    assert resume_turn(agent, "t", True).text == "a is 1"
    assert len(model.calls) == 2 and seen == ["a"] and paid_calls(db_url) == 2


def test_the_stock_resume_command_works_and_a_waiting_thread_refuses_a_new_message(saver: Any) -> None:
    model = echo()
    agent = agent_with(saver, model, approval_token_threshold=3)
    config = thread_config("t")
    out = agent.invoke({"messages": [HumanMessage("plain graph path")]}, config)
    assert out["__interrupt__"][0].value["kind"] == "remem.approval" and model.calls == []
    with pytest.raises(ApprovalPendingError):  # answer it first: nothing is written
        run_turn(agent, "t", "another message")
    assert kept(agent) == [("HumanMessage", "plain graph path")]
    done = agent.invoke(Command(resume=True), config)
    assert done["messages"][-1].text == "Reply to: plain graph path" and len(model.calls) == 1
    with pytest.raises(NotFoundError, match="no model call waits"):
        resume_turn(agent, "t", True)
    assert len(model.calls) == 1


def test_a_refused_call_ends_the_turn_without_compaction(saver: Any) -> None:
    model = echo()
    compactions: list[int] = []

    class CountingSummarizer(ExtractiveSummarizer):
        def summarize(self, summary: str, messages: Any) -> Any:
            compactions.append(len(messages))
            return super().summarize(summary, messages)

    agent = build_agent(
        model,
        strategy="summary",
        checkpointer=saver,
        summarizer=CountingSummarizer(),
        settings=Settings(approval_token_threshold=1, keep_messages=1, summary_trigger_messages=2),
    )
    for n in range(3):  # approved turns compact once the thread is long enough
        with pytest.raises(ApprovalPendingError):
            run_turn(agent, "t", f"question {n} with some words")
        resume_turn(agent, "t", True)
    assert compactions and len(model.calls) == 3
    before = list(compactions)
    with pytest.raises(ApprovalPendingError):
        run_turn(agent, "t", "a question refused")
    assert is_refusal(resume_turn(agent, "t", False))
    assert compactions == before and len(model.calls) == 3  # no summary, no model call


def test_the_async_turn_pauses_and_resumes_the_same_way(tmp_path: Path) -> None:
    from remem import acheckpointer_from_url

    url = f"sqlite:///{tmp_path / 'async.db'}"
    model = echo()

    async def main() -> None:
        async with acheckpointer_from_url(url) as saver:
            agent = agent_with(saver, model, approval_token_threshold=3)
            with pytest.raises(ApprovalPendingError):
                await arun_turn(agent, "t", "async hello")
            assert model.calls == []
            assert (await aresume_turn(agent, "t", True)).text == "Reply to: async hello"
            with pytest.raises(ApprovalPendingError):
                await arun_turn(agent, "t", "async no")
            assert is_refusal(await aresume_turn(agent, "t", False))

    asyncio.run(main())
    assert len(model.calls) == 1 and paid_calls(url) == 1


def test_the_middleware_and_the_agent_share_one_approval_payload() -> None:
    assert budget.Estimate is Estimate
    payload = Estimate("m", 10, None, "t", None, 1).as_dict()
    assert payload == {
        "kind": "remem.approval",
        "model": "m",
        "input_tokens": 10,
        "cost": None,
        "thread": "t",
        "user": None,
        "turn": 1,
    }


@given(st.one_of(st.booleans(), st.none(), st.integers(), st.text(max_size=5)))
def test_only_a_yes_approves(answer: Any) -> None:
    yes = answer is True or (isinstance(answer, str) and answer.strip().lower() in ("y", "yes", "true"))
    assert approved(answer) is yes
    assert approved({"approved": answer}) is yes


# -- remem chat on remem's own agent: a real process on real stdin ----------------------------------------
def scripted_agent(*, checkpointer: Any, settings: Any) -> Any:
    """remem's agent (build_agent) on a scripted model, with the settings the chat read."""
    return build_agent(echo(), strategy="filter", checkpointer=checkpointer, settings=settings)


def test_remem_chat_asks_yes_no_for_remem_s_own_agent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    env = {
        **os.environ,
        "REMEM_DATABASE_URL": url,
        "REMEM_APPROVAL_TOKEN_THRESHOLD": "3",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),  # the code under test
        "NO_COLOR": "1",
    }
    env.pop("REMEM_CONFIG", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "remem.cli",
            "chat",
            "--thread",
            "t",
            "--agent",
            "tests.test_agent_approval:scripted_agent",
        ],
        input="hello there\ny\nsecond question\nn\n/exit\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "remem-agent[filter]" in done.stdout  # remem's own agent, not a middleware graph
    assert done.stdout.count("needs approval: about") == 2
    assert "assistant> Reply to: hello there" in done.stdout
    assert "was not approved" in done.stdout and "Reply to: second question" not in done.stdout
    assert paid_calls(url) == 1
