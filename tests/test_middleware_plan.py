"""Compaction planning as properties over random provider-valid histories (tool calls included)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from remem.memory import CARD_MESSAGE_NAME
from remem.messages import is_provider_valid, last_human_index, persistable, system_prefix_length
from remem.middleware._compaction import organic_messages, plan_compaction, prompt_tokens
from tests.histories import histories

CARD = HumanMessage(content="<context_card></context_card>", name=CARD_MESSAGE_NAME, id="card")


def check_compaction(history: list, kept: int, pattern: str, with_old_card: bool) -> set[str]:
    """Check one plan against the spec; the names of the checks it reached."""
    prefix = system_prefix_length(history)
    if with_old_card:  # a card injected by an earlier compaction is not part of the conversation
        history = [*history[:prefix], CARD, *history[prefix:]]
    organic = organic_messages(history)
    body = organic[prefix:]
    plan = plan_compaction(history, kept, pattern)
    # The spec, by brute force: the tail starts at the latest cut that is safe (not on a tool result),
    # keeps ``kept`` messages and the latest question, and folds something; None when there is none.
    question = last_human_index(body)
    cuts = [
        c
        for c in range(1, len(body) + 1)
        if c <= len(body) - kept
        and (question is None or c <= question)
        and (c == len(body) or not isinstance(body[c], ToolMessage))
    ]
    if plan is None:
        assert cuts == []
        return {"no plan"}
    reached = {"plan", pattern}
    start = len(body) - len(plan.tail)
    assert start == max(cuts)
    assert list(plan.system) == organic[:prefix]
    assert list(plan.tail) == body[start:] and start > 0  # the tail is a suffix; something is folded
    assert not plan.tail or not isinstance(plan.tail[0], ToolMessage)
    compacted = [*plan.system, CARD, *plan.after_card]
    assert is_provider_valid(compacted), compacted
    if question is not None:
        reached.add("question kept")
        assert question >= start  # the latest user message is in the tail
    if any(isinstance(m, ToolMessage) for m in body[:start]):
        reached.add("tool results folded")
    if with_old_card:
        reached.add("old card dropped")
    stored_in_tail = [m for m in plan.tail if persistable(m) is not None]
    assert plan.except_last == len(stored_in_tail)
    if stored_in_tail:
        reached.add("stored tail")
    if pattern == "external_tail":
        assert plan.after_card == plan.tail and plan.max_recent == 0
    else:
        assert plan.max_recent == plan.except_last
        assert not any(persistable(m) is not None for m in plan.after_card)  # those are inside the card
    return reached


def test_compacted_histories_stay_valid_and_keep_the_question() -> None:
    reached: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None)
    @given(
        history=histories(min_turns=0, max_turns=10),
        kept=st.integers(0, 8),
        pattern=st.sampled_from(["external_tail", "self_contained"]),
        with_old_card=st.booleans(),
    )
    def run(history: list, kept: int, pattern: str, with_old_card: bool) -> None:
        reached["case"] += 1
        reached.update(check_compaction(history, kept, pattern, with_old_card))

    run()
    # Each case alone also passes when no plan is made; the run must have made plans of every kind.
    assert reached["case"] >= 75, reached
    for check in ("plan", "external_tail", "self_contained", "question kept", "tool results folded"):
        assert reached[check] >= reached["case"] // 10, (check, reached)
    for check in ("no plan", "old card dropped", "stored tail"):
        assert reached[check] > 0, (check, reached)


def test_only_user_turns_and_final_replies_are_persisted() -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=100, deadline=None)
    @given(history=histories(min_turns=0, max_turns=6))
    def run(history: list) -> None:
        for message in [*history, CARD]:
            turn = persistable(message)
            # Exactly the user's turns and the final replies: a persistable that refused everything fails.
            wanted = message is not CARD and bool(message.text.strip())
            wanted = wanted and (
                isinstance(message, HumanMessage)
                or (isinstance(message, AIMessage) and not message.tool_calls)
            )
            assert (turn is not None) == wanted, message
            kind = "card" if message is CARD else type(message).__name__
            seen[f"{kind} {'kept' if wanted else 'dropped'}"] += 1
            if turn is None:
                continue
            assert not isinstance(message, SystemMessage)
            assert turn["role"] == ("user" if isinstance(message, HumanMessage) else "assistant")
            assert turn["id"] == message.id

    run()
    # Both answers were given, for every kind of message the histories hold.
    for kind in ("HumanMessage kept", "AIMessage kept", "AIMessage dropped", "ToolMessage dropped"):
        assert seen[kind] >= 20, (kind, seen)
    assert seen["SystemMessage dropped"] > 0, seen


def test_a_long_history_is_compacted() -> None:
    # The properties above hold trivially when no plan is made: here one must be.
    history = [
        m
        for i in range(6)
        for m in (HumanMessage(content=f"q{i}", id=f"h{i}"), AIMessage(content=f"a{i}", id=f"a{i}"))
    ]
    for pattern in ("external_tail", "self_contained"):
        plan = plan_compaction(history, 2, pattern)
        assert plan is not None and [m.id for m in plan.tail] == ["h5", "a5"]
        assert plan.except_last == 2


def test_stable_ids_for_messages_without_one() -> None:
    first = persistable(HumanMessage(content="hello there"))
    again = persistable(HumanMessage(content="hello there"))
    other = persistable(AIMessage(content="hello there"))
    assert first is not None and again is not None and other is not None
    assert first["id"] == again["id"] != other["id"]


def test_prompt_tokens_count_system_and_tools_but_not_the_card() -> None:
    def count(messages: list) -> int:
        return sum(len(str(m.content)) for m in messages)

    messages = [HumanMessage(content="x" * 10), CARD]
    bare = prompt_tokens(messages, system=None, tools=[], count=count)
    assert bare == 10
    with_system = prompt_tokens(messages, system=SystemMessage(content="y" * 7), tools=[], count=count)
    assert with_system == 17
    schema = {"type": "function", "function": {"name": "f", "description": "z" * 50, "parameters": {}}}
    assert prompt_tokens(messages, system=None, tools=[schema], count=count) > 60
