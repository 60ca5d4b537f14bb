"""``remem demo``: a bundled 65-turn conversation replayed through the agent, with no key and no server.

A deterministic offline responder stands in for the model: it answers scripted turns from the script and
recall questions only from what it was actually sent, so a "✓" means the fact reached the model
(through the rolling summary or the kept messages), not that the script knew the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from remem._url import display_url
from remem.agent import build_agent, run_turn, thread_config
from remem.checkpoint import checkpointer_from_url
from remem.config import Settings
from remem.messages import approximate_token_count
from remem.models import ScriptedChatModel

__all__ = ["DemoReport", "DemoTurn", "load_script", "recall_responder", "run_demo"]

NOT_FOUND = "I don't have that in what I was given."
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")


@dataclass(frozen=True)
class DemoTurn:
    turn: int
    user: str
    messages_in_state: int
    tokens_seen: int
    tokens_full_history: int
    summary_refreshed: bool
    recall: str | None = None
    recalled: bool | None = None


@dataclass
class DemoReport:
    thread_id: str
    database_url: str  # as it may be shown (display_url): no user, no password
    turns: list[DemoTurn] = field(default_factory=list)
    summary: str = ""
    messages_in_state: int = 0

    @property
    def tokens_seen(self) -> int:
        return sum(t.tokens_seen for t in self.turns)

    @property
    def tokens_full_history(self) -> int:
        return sum(t.tokens_full_history for t in self.turns)

    @property
    def recalled(self) -> tuple[int, int]:
        asked = [t for t in self.turns if t.recall is not None]
        return sum(1 for t in asked if t.recalled), len(asked)


def load_script() -> list[dict[str, str]]:
    text = resources.files("remem").joinpath("data/demo_conversation.json").read_text(encoding="utf-8")
    turns: list[dict[str, str]] = json.loads(text)["turns"]
    return turns


def recall_responder(keyword: str) -> Callable[[list[BaseMessage]], str]:
    """A reply that quotes the first sentence the model was sent (before the question) naming ``keyword``."""

    def reply(messages: list[BaseMessage]) -> str:
        for message in messages[:-1]:
            for sentence in _SENTENCE.split(message.text):
                if keyword.lower() in sentence.lower():
                    return "From our conversation: " + sentence.strip(" -")
        return NOT_FOUND

    return reply


def run_demo(
    settings: Settings,
    *,
    thread_id: str | None = None,
    on_turn: Callable[[DemoTurn], None] | None = None,
    turns: int | None = None,
) -> DemoReport:
    """Replay the bundled conversation (its first ``turns`` turns) on ``settings.database_url``."""
    script = load_script()[:turns]
    replies: list[Any] = [
        t["assistant"] if "assistant" in t else recall_responder(t["recall"]) for t in script
    ]
    model = ScriptedChatModel(replies=replies, model_name="offline-responder")
    thread_id = thread_id or "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    report = DemoReport(thread_id=thread_id, database_url=display_url(settings.database_url))
    full_history: list[BaseMessage] = []
    with checkpointer_from_url(settings.database_url) as saver:
        agent = build_agent(model, checkpointer=saver, summarizer="extractive", settings=settings)
        summary = ""
        for n, turn in enumerate(script, start=1):
            full_history.append(HumanMessage(content=turn["user"]))
            reply = run_turn(agent, thread_id, turn["user"], max_message_chars=settings.max_message_chars)
            full_history.append(AIMessage(content=reply.text))
            values = agent.get_state(thread_config(thread_id)).values
            recall = turn.get("recall")
            row = DemoTurn(
                turn=n,
                user=turn["user"],
                messages_in_state=len(values["messages"]),
                tokens_seen=approximate_token_count(model.calls[-1]),
                tokens_full_history=approximate_token_count(full_history[:-1]),
                summary_refreshed=values.get("summary", "") != summary,
                recall=recall,
                recalled=None if recall is None else recall.lower() in reply.text.lower(),
            )
            summary = values.get("summary", "")
            report.turns.append(row)
            if on_turn:
                on_turn(row)
        report.summary = summary
        report.messages_in_state = len(values["messages"])
    return report
