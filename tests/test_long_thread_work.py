"""Per-turn work on a long thread: a turn and a summary refresh do work proportional to what changed since
the last one, never to the length of the thread (issue 22, point 1; ``bench/bigthread.py`` measures it).

Work is counted, never timed: values the saver decodes, messages token-counted, messages the summariser
is given and sentences it scores. Each count is taken on a thread of two lengths and must be the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from remem import summarize as summarize_module
from remem.agent import build_agent, run_turn, thread_config
from remem.checkpoint import SqliteSaver, _codec
from remem.checkpoint._cache import SaverCache
from remem.checkpoint._serde import RememSerializer
from remem.config import Settings
from remem.messages import tokens
from remem.models import ScriptedChatModel
from remem.summarize import ExtractiveSummarizer, SummaryResult

THREAD = "long"
SHORT, LONG = 200, 2000


def _conversation(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"My locker {i} is in building {i % 13}, near Ingrid's desk.", id=f"m{i}")
        if i % 2 == 0
        else AIMessage(f"Noted: locker {i - 1} in building {(i - 1) % 13}.", id=f"m{i}")
        for i in range(n)
    ]


@dataclass
class _Recording:
    """The extractive summariser, noting how many messages each call was given."""

    inner: ExtractiveSummarizer = field(default_factory=ExtractiveSummarizer)
    calls: list[int] = field(default_factory=list)

    def summarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        self.calls.append(len(messages))
        return self.inner.summarize(previous, messages)

    async def asummarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        return self.summarize(previous, messages)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of values decoded by the saver and of messages token-counted, from now on."""
    counts = {"decoded": 0, "tokenized": 0}
    loads_many, count_tokens = _codec.loads_many, tokens.count_tokens_approximately

    def decode(serde: Any, blobs: Any) -> Any:
        counts["decoded"] += len(blobs)
        return loads_many(serde, blobs)

    def count(messages: Any, *args: Any, **kwargs: Any) -> Any:
        counts["tokenized"] += len(messages)
        return count_tokens(messages, *args, **kwargs)

    monkeypatch.setattr(_codec, "loads_many", decode)
    monkeypatch.setattr(tokens, "count_tokens_approximately", count)
    return counts


def _next_turn_work(path: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, int], list[int]]:
    """The work of the turn after the one that folded an ``n``-message backlog into the summary."""
    summarizer = _Recording()
    with SqliteSaver.from_conn_string(str(path)) as saver:
        graph = build_agent(
            ScriptedChatModel(),
            strategy="summary",
            summarizer=summarizer,
            checkpointer=saver,
            settings=Settings(strategy="summary"),
        )
        config = thread_config(THREAD)
        graph.update_state(config, {"messages": _conversation(n)}, as_node="summarize_conversation")
        run_turn(graph, THREAD, "Hello again.")  # the catch-up: the backlog goes into the summary
        assert n - 10 < sum(summarizer.calls) <= n  # all but the kept tail
        summarizer.calls.clear()
        with monkeypatch.context() as patch:
            counts = _counting(patch)
            reply = run_turn(graph, THREAD, "My sister Oksana moved to Porto.")
            counts = dict(counts)
        assert reply.text == "OK."
        messages = graph.get_state(config).values["messages"]
        assert [m.text for m in messages[-2:]] == ["My sister Oksana moved to Porto.", "OK."]
        return counts, list(summarizer.calls)


def test_the_turn_after_a_catch_up_does_the_same_work_however_long_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = _next_turn_work(tmp_path / "short.db", SHORT, monkeypatch)
    long = _next_turn_work(tmp_path / "long.db", LONG, monkeypatch)
    assert short == long, (short, long)
    counts, summarised = long
    # What the state holds now (the summary's kept tail and this turn), not the thread's 2,000 messages.
    assert 0 < counts["decoded"] <= 12, counts
    assert 0 < counts["tokenized"] <= 20, counts
    assert all(n <= 8 for n in summarised), summarised


def _summary_refresh_work(n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, str]:
    summarizer = ExtractiveSummarizer()
    previous = summarizer.summarize("", _conversation(n)).text
    new = [
        HumanMessage("My sister Oksana and my brother Piotr live in Porto at number 12.", id="new-1"),
        AIMessage("Porto is a fine city; I will remember that Oksana lives there.", id="new-2"),
    ]
    scored, pointed = [0], [0]
    fact_score, points = summarize_module._fact_score, ExtractiveSummarizer._points

    def count_score(sentence: str) -> int:
        scored[0] += 1
        return fact_score(sentence)

    def count_points(self: ExtractiveSummarizer, message: BaseMessage) -> Any:
        pointed[0] += 1
        return points(self, message)

    with monkeypatch.context() as patch:
        patch.setattr(summarize_module, "_fact_score", count_score)
        patch.setattr(ExtractiveSummarizer, "_points", count_points)
        text = summarizer.summarize(previous, new).text
    assert "Oksana and my brother Piotr live in Porto" in text
    return pointed[0], scored[0] - len(previous.splitlines()), text


def test_a_summary_refresh_reads_only_the_new_messages_and_its_own_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = _summary_refresh_work(SHORT, monkeypatch)
    long = _summary_refresh_work(LONG, monkeypatch)
    # Two messages read; besides the summary's own lines (at most one score each, however many messages
    # they came from), only the new messages' sentences are scored.
    assert short[0] == long[0] == 2
    assert short[1] == long[1] <= 4, (short[1], long[1])


def test_a_long_list_is_decoded_in_bounded_runs_as_one_at_a_time_would() -> None:
    serde = RememSerializer()
    messages = _conversation(2 * _codec.DECODE_RUN + 5)
    payloads = [serde.dumps_typed(m) for m in messages]
    sizes: list[int] = []

    class Counting(RememSerializer):
        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            value = super().loads_typed(data)
            sizes.append(len(value) if isinstance(value, list) else 1)
            return value

    assert _codec.loads_many(Counting(), payloads) == messages
    # Three arrays, none longer than a run: the copy made to join them stays small however long the list.
    assert sizes == [_codec.DECODE_RUN, _codec.DECODE_RUN, 5]


def test_a_read_larger_than_a_quarter_of_the_payload_cache_is_not_kept() -> None:
    cache = SaverCache(max_payload_bytes=4000)
    small = {n: ("msgpack", b"x" * 100) for n in range(10)}  # 1,000 bytes: kept
    cache.put_payloads(1, small)
    assert cache.payloads(1, small) == small
    big = {n: ("msgpack", b"y" * 100) for n in range(100, 111)}  # 1,100 bytes, past a quarter
    cache.put_payloads(1, big)
    assert cache.payloads(1, big) == {}
    assert cache.payloads(1, small) == small  # and it pushed nothing out


def test_the_turn_input_check_merges_the_history_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_turn``'s check of its input merges the thread's history with it once (it merged twice)."""
    from langgraph.graph import message as graph_message

    from remem import _turn

    merged: list[int] = []
    add_messages = graph_message.add_messages

    def counted(left: Any, right: Any) -> Any:
        merged.append(len(left))
        return add_messages(left, right)

    monkeypatch.setattr(graph_message, "add_messages", counted)
    monkeypatch.setattr(_turn, "add_messages", counted, raising=False)  # where it was imported before
    history = _conversation(LONG)
    rules = _turn.TurnRules(lease_timeout=1.0, precheck=None)
    _turn._check_input(rules, {"messages": history}, [HumanMessage("Hello again.", id="new")], {})
    assert merged == [LONG]
