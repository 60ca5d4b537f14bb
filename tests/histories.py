"""Hypothesis strategies for random provider-valid histories: system messages, user turns, tool calls
(parallel ones too, results in any order) and replies."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

_ids = itertools.count()


def _id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


_text = st.text(alphabet="abcdefghij klmnop.,?", min_size=1, max_size=120).filter(lambda t: t.strip() != "")


@st.composite
def tool_round(draw: st.DrawFn) -> list[BaseMessage]:
    """An AI message calling 1-3 tools, then all of their results in any order."""
    calls = [
        {
            "name": draw(st.sampled_from(["search", "add", "lookup"])),
            "args": {"q": draw(_text)},
            "id": _id("call"),
        }
        for _ in range(draw(st.integers(1, 3)))
    ]
    results = [ToolMessage(content=draw(_text), tool_call_id=c["id"], id=_id("tool")) for c in calls]
    order = draw(st.permutations(results))
    return [
        AIMessage(content=draw(st.sampled_from(["", "let me check"])), tool_calls=calls, id=_id("ai")),
        *order,
    ]


@st.composite
def turn(draw: st.DrawFn) -> list[BaseMessage]:
    """A user message, 0-2 tool rounds, and usually a final reply."""
    messages: list[BaseMessage] = [HumanMessage(content=draw(_text), id=_id("human"))]
    for _ in range(draw(st.integers(0, 2))):
        messages.extend(draw(_TOOL_ROUND))
    if draw(st.booleans()) or len(messages) == 1 or draw(st.integers(0, 3)) > 0:
        messages.append(AIMessage(content=draw(_text), id=_id("ai")))
    return messages


# Built once: a strategy made inside a draw is new each time, and Hypothesis validates each new one
# (a third of the drawing time of a history); the same object draws the same examples.
_TOOL_ROUND, _TURN = tool_round(), turn()


@st.composite
def histories(draw: st.DrawFn, min_turns: int = 0, max_turns: int = 12) -> list[BaseMessage]:
    """A provider-valid history; sometimes opening on an AI greeting, sometimes with no user message."""
    messages: list[BaseMessage] = [
        SystemMessage(content=draw(_text), id=_id("system")) for _ in range(draw(st.integers(0, 2)))
    ]
    if draw(st.integers(0, 5)) == 0:
        messages.append(AIMessage(content=draw(_text), id=_id("ai")))
    for _ in range(draw(st.integers(min_turns, max_turns))):
        messages.extend(draw(_TURN))
    return messages
