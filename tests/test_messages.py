"""Validity checks, cut points, token counting and input coercion."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from remem.errors import ConfigError, InvalidMessagesError
from remem.messages import (
    approximate_token_count,
    check_can_append,
    coerce_messages,
    exact_token_counter,
    history_problems,
    is_provider_valid,
    safe_cut_at_or_before,
    token_counter,
)


def call(*ids: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": i} for i in ids])


def result(call_id: str) -> ToolMessage:
    return ToolMessage(content="r", tool_call_id=call_id)


def test_a_valid_history_has_no_problems() -> None:
    history = [
        SystemMessage("s"),
        HumanMessage("q"),
        call("a", "b"),
        result("b"),
        result("a"),
        AIMessage("done"),
    ]
    assert history_problems(history) == []


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([result("a")], "at the start"),
        ([HumanMessage("q"), result("a")], "no call just before it"),
        ([HumanMessage("q"), call("a"), HumanMessage("again")], "comes before the results"),
        ([HumanMessage("q"), call("a", "b"), result("a")], "ends before the results"),
        ([HumanMessage("q"), call("a"), result("a"), result("a")], "answered twice"),
        ([HumanMessage("q"), SystemMessage("late")], "system message after the start"),
    ],
)
def test_each_kind_of_invalid_history_is_named(history: list, problem: str) -> None:  # type: ignore[type-arg]
    problems = history_problems(history)
    assert any(problem in p for p in problems), problems
    assert not is_provider_valid(history)


def test_pending_calls_are_allowed_only_when_asked() -> None:
    history = [HumanMessage("q"), call("a")]
    assert history_problems(history)
    assert history_problems(history, allow_pending_calls=True) == []


def test_safe_cut_moves_back_over_tool_results() -> None:
    history = [HumanMessage("q"), call("a", "b"), result("a"), result("b"), AIMessage("x")]
    assert safe_cut_at_or_before(history, 3) == 1
    assert safe_cut_at_or_before(history, 4) == 4
    assert safe_cut_at_or_before(history, 3, floor=2) == 2


def test_check_can_append_refuses_an_orphan_result_and_keeps_the_history() -> None:
    history = [HumanMessage("q", id="1"), AIMessage("a", id="2")]
    with pytest.raises(InvalidMessagesError, match="the thread was not changed"):
        check_can_append(history, [result("zz")])
    check_can_append(history, [HumanMessage("next")])


def test_exact_counters_count_real_tokens_offline() -> None:
    cl100k = exact_token_counter("cl100k_base")
    assert cl100k([HumanMessage("hello world")]) == 2 + 3  # two tokens plus the per-message overhead
    o200k = token_counter("o200k")
    text = [HumanMessage("The quick brown fox jumps over the lazy dog. " * 20)]
    exact, approx = o200k(text), approximate_token_count(text)
    assert 0 < exact < approx  # the approximation errs high, as documented


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("GPT-4o-2024-08-06", "o200k_base"),
        ("ft:gpt-4o-mini:acme::x1", "o200k_base"),
        ("openai/gpt-4.1-nano", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("gpt-4omega", None),  # a family's name must end where a variant starts
        ("o10", None),
        ("llama3.1:8b", None),
        ("scripted", None),
    ],
)
def test_a_models_encoding_is_found_from_its_name(model: str, encoding: str | None) -> None:
    from remem.messages import encoding_for_model

    assert encoding_for_model(model) == encoding


def test_an_unknown_model_never_loads_the_tokenizer() -> None:
    # The tokenizer's import loads every encoding (about a second): a model with no known encoding, the
    # case of every local model, must not pay it at its first call.
    import subprocess
    import sys

    code = (
        "import sys; from remem.messages import counter_for_model; "
        "assert counter_for_model('llama3.1:8b') is None; "
        "assert 'bpe_openai' not in sys.modules, 'imported'; "
        "assert counter_for_model('gpt-4o-mini') is not None; "
        "assert 'bpe_openai' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_counter_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="approximate, o200k or cl100k"):
        token_counter("gpt2")


def test_coerce_accepts_text_dicts_tuples_and_messages() -> None:
    messages = coerce_messages(
        ["hi", {"role": "assistant", "content": "hello"}, ("user", "x"), HumanMessage("y")]
    )
    assert [m.type for m in messages] == ["human", "ai", "human", "human"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "no message was given"),
        ("   ", "is empty"),
        (42, "expected a message"),
        ([{"role": "wizard", "content": "x"}], "cannot be read"),
        ([{"content": "no role"}], "cannot be read"),
        ("x" * 1_048_576, "over the limit of 100,000"),
    ],
)
def test_coerce_rejects_bad_input_with_what_to_do(value: object, message: str) -> None:
    with pytest.raises(InvalidMessagesError, match=message):
        coerce_messages(value)
