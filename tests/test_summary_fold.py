"""The memory client's running fold (issue 22, point 1): with the extractive summariser, each append folds
the thread's complete steps into a running summary, so that the first card or summary of a long thread
reads and summarises only what came after the fold, never the whole thread.

Work is counted, never timed: the messages the summariser scores (``ExtractiveSummarizer._points``) in
each call, on threads of two lengths.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from remem import Memory
from remem.memory._plans import FOLD_KEY, FOLD_LAG
from remem.memory._records import summaries_ns
from remem.summarize import DEFAULT_CHUNK_MESSAGES, ExtractiveSummarizer
from remem.testing import offline_settings

SETTINGS = offline_settings()
SHORT, LONG = 320, 3200  # the same remainder of a step: the same tail after the fold
BOUND = FOLD_LAG + 2 * DEFAULT_CHUNK_MESSAGES


def _conversation(n: int, start: int = 0) -> list[BaseMessage]:
    return [
        HumanMessage(f"My locker {i} is in building {i % 13}, near Ingrid's desk in Gdansk.", id=f"m{i}")
        if i % 2 == 0
        else AIMessage(f"Noted: locker {i - 1} in building {(i - 1) % 13}.", id=f"m{i}")
        for i in range(start, start + n)
    ]


@pytest.fixture
def scored(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many messages the extractive summariser scores, one count per ``summarize`` call."""
    calls: list[int] = []
    summarize, points = ExtractiveSummarizer.summarize, ExtractiveSummarizer._points

    def counted_summarize(self: ExtractiveSummarizer, previous: str, messages: Any) -> Any:
        calls.append(0)
        return summarize(self, previous, messages)

    def counted_points(self: ExtractiveSummarizer, message: BaseMessage) -> Any:
        calls[-1] += 1
        return points(self, message)

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", counted_summarize)
    monkeypatch.setattr(ExtractiveSummarizer, "_points", counted_points)
    yield calls


def _first_card_work(path: Path, n: int, batch: int, scored: list[int]) -> tuple[list[int], list[int], str]:
    with Memory.from_url(f"sqlite:///{path}", settings=SETTINGS) as memory:
        thread = memory.thread("t", user_id="u")
        messages = _conversation(n)
        for start in range(0, n, batch):
            thread.add_messages(messages[start : start + batch])
        adds = list(scored)
        scored.clear()
        thread.get_context_card()
        # the card writes the summary whether or not it shows it (records placed first take the room)
        (summary,) = thread.summaries()
        assert summary.revision == 1
        text = summary.text
        return adds, list(scored), text


@pytest.mark.parametrize("batch", [2, 500])
def test_the_first_card_of_a_long_thread_summarises_only_what_came_after_the_fold(
    tmp_path: Path, scored: list[int], batch: int
) -> None:
    _, short_card, short_text = _first_card_work(tmp_path / "short.db", SHORT, batch, scored)
    long_adds, long_card, long_text = _first_card_work(tmp_path / "long.db", LONG, batch, scored)
    # The card's summary starts from the fold: it scores the same few messages however long the thread.
    assert short_card == long_card and sum(long_card) <= BOUND, (short_card, long_card)
    # Each append folds its own messages and at most two steps more: the whole thread once, in all.
    assert all(n <= batch + 2 * DEFAULT_CHUNK_MESSAGES for n in long_adds), max(long_adds)
    assert LONG - BOUND <= sum(long_adds) <= LONG
    # It is the summary one call over the whole thread writes.
    assert long_text == ExtractiveSummarizer().summarize("", _conversation(LONG)).text
    assert short_text == ExtractiveSummarizer().summarize("", _conversation(SHORT)).text


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.integers(min_value=1, max_value=90), min_size=1, max_size=12),
    except_last=st.integers(min_value=0, max_value=FOLD_LAG + 8),
)
def test_a_summary_from_the_fold_is_the_one_a_single_call_writes(
    batches: list[int], except_last: int
) -> None:
    with Memory.from_url("memory://", settings=SETTINGS) as memory:
        thread = memory.thread("t", user_id="u")
        n = 0
        for size in batches:
            thread.add_messages(_conversation(size, n))
            n += size
        summary = thread.get_summary(except_last=except_last, token_budget=100_000)
        boundary = max(n - except_last, 0)
        expected = ExtractiveSummarizer().summarize("", _conversation(boundary)).text if boundary else ""
        assert summary.text == expected
        assert summary.covered_count == boundary
        if boundary:
            assert (summary.first_message_id, summary.last_message_id) == ("m0", f"m{boundary - 1}")


def test_a_summariser_other_than_the_default_extractive_keeps_no_fold(tmp_path: Path) -> None:
    with Memory.from_url(f"sqlite:///{tmp_path / 'm.db'}", settings=SETTINGS) as memory:
        memory.summarizer = ExtractiveSummarizer(max_tokens=200)
        thread = memory.thread("t", user_id="u")
        thread.add_messages(_conversation(300))
        fold = memory.store.get(summaries_ns("t"), FOLD_KEY)
        assert fold is not None and fold.value["covered"] > 0
        # Another configuration does not start from it (its summary would not be that one's).
        memory.summarizer = ExtractiveSummarizer(max_tokens=300)
        summary = thread.get_summary(token_budget=100_000)
        assert summary.text == ExtractiveSummarizer(max_tokens=300).summarize("", _conversation(300)).text


def test_undoing_an_ingestion_drops_a_fold_that_summarised_its_messages(tmp_path: Path) -> None:
    from remem.ingestion import begin_ingestion, undo_ingestion

    with Memory.from_url(f"sqlite:///{tmp_path / 'm.db'}", settings=SETTINGS) as memory:
        thread = memory.thread("t", user_id="u")
        thread.add_messages(_conversation(40))
        with begin_ingestion(memory, kind="load", source="crm.jsonl") as ing:
            ing.add_messages("t", _conversation(200, 40), user_id="u")
        assert memory.store.get(summaries_ns("t"), FOLD_KEY) is not None
        undo_ingestion(memory, last=True)
        assert memory.store.get(summaries_ns("t"), FOLD_KEY) is None  # it held the removed messages
        thread.add_messages(_conversation(200, 1000))  # the next appends fold again, from the start
        summary = thread.get_summary(token_budget=100_000)
        kept = _conversation(40) + _conversation(200, 1000)
        assert summary.text == ExtractiveSummarizer().summarize("", kept).text
        assert "locker 100 " not in summary.text
