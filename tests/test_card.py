"""Context cards: the guide's rules, the sections, the tail never leaking in, the budget, and stability."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.store.base import GetOp, Op, Result
from langgraph.store.memory import InMemoryStore

from remem import ExtractiveSummarizer, Memory
from remem.memory import MemoryRecord, Thread
from remem.memory._backends import index_config
from remem.memory._plans import SUMMARY_PAGE
from remem.memory._records import messages_ns
from remem.memory._search import CARD_RECORDS
from remem.summarize import SummaryResult
from remem.testing import offline_settings

SETTINGS = offline_settings()


@pytest.fixture
def memory(memory_url: str) -> Iterator[Memory]:
    with Memory.from_url(memory_url, settings=SETTINGS) as mem:
        yield mem


@pytest.fixture
def in_memory() -> Memory:
    return Memory.from_url("memory://", settings=SETTINGS)


def _maya(memory: Memory, thread_id: str = "maya-thread", frequency: int = 4) -> Thread:
    thread = memory.thread(thread_id, user_id="maya", context_summary_update_frequency=frequency)
    thread.add_messages(
        [
            {
                "role": "user",
                "content": "I'm Maya. I'm migrating our nightly invoice reconciliation workflow "
                "from cron jobs to LangGraph.",
                "id": "u1",
                "metadata": {"topic": "migration"},
            },
            {
                "role": "assistant",
                "content": "Understood: invoice reconciliation moves to LangGraph.",
                "id": "a1",
            },
            {
                "role": "user",
                "content": "The failing step right now is ledger enrichment after reconciliation.",
                "id": "u2",
                "metadata": {"topic": "failure"},
            },
            {"role": "assistant", "content": "Ledger enrichment failing: check the schema.", "id": "a2"},
            {"role": "user", "content": "Zebra quokka platypus is my tail marker.", "id": "u3"},
            {"role": "assistant", "content": "Noted the quokka marker.", "id": "a3"},
        ]
    )
    return thread


def _parse(content: str) -> ET.Element:
    root = ET.fromstring(content)
    assert root.tag == "context_card"
    return root


def test_negative_except_last_messages_is_refused(in_memory: Memory) -> None:
    thread = _maya(in_memory)
    with pytest.raises(ValueError, match=r"^except_last_messages must be non-negative\.$"):
        thread.get_context_card(except_last_messages=-1)


@pytest.mark.parametrize("max_recent", [1, 2, 4])
def test_a_tail_given_twice_is_refused(in_memory: Memory, max_recent: int) -> None:
    thread = _maya(in_memory)
    with pytest.raises(
        ValueError,
        match=r"^except_last_messages requires max_recent_messages to be zero or the same count\.$",
    ):
        thread.get_context_card(except_last_messages=3, max_recent_messages=max_recent)


def test_allowed_combinations(in_memory: Memory) -> None:
    thread = _maya(in_memory)
    external = thread.get_context_card(except_last_messages=3, max_recent_messages=0)
    inside = thread.get_context_card(except_last_messages=3, max_recent_messages=3)
    recent = thread.get_context_card(except_last_messages=0, max_recent_messages=2)
    assert external.content.startswith("<context_card>") and "<message " not in external.content
    assert inside.content.count("<message ") == 3  # the excluded tail is held inside the card
    assert recent.content.count("<message ") == 2


def test_an_empty_thread_renders_an_empty_card(memory: Memory) -> None:
    thread = memory.thread("empty", user_id="nobody")
    card = thread.get_context_card(except_last_messages=3)
    assert card.content == "" and str(card) == ""


def test_external_tail_card_never_contains_the_tail(memory: Memory) -> None:
    thread = _maya(memory)
    card = thread.get_context_card(except_last_messages=2, max_recent_messages=0, query="quokka zebra marker")
    assert card.content
    assert "quokka" not in card.content.lower() and "zebra" not in card.content.lower()
    assert card.excluded_message_ids == ("u3", "a3")
    root = _parse(card.content)
    assert root.find("recent_messages") is None
    records = root.findall("relevant_information/record")
    assert records, "earlier messages are recalled"
    assert {r.get("record_id") for r in records}.isdisjoint({"u3", "a3"})
    for r in records:
        assert r.get("type") and r.get("status") is None  # active: no status label


def test_self_contained_card_holds_the_tail_as_recent_messages(memory: Memory) -> None:
    thread = _maya(memory)
    card = thread.get_context_card(except_last_messages=2, max_recent_messages=2)
    root = _parse(card.content)
    recent = root.findall("recent_messages/message")
    assert [(m.get("role"), m.text) for m in recent] == [
        ("user", "Zebra quokka platypus is my tail marker."),
        ("assistant", "Noted the quokka marker."),
    ]
    assert all(m.get("timestamp") for m in recent)
    assert [m.id for m in card.recent] == ["u3", "a3"]
    # The tail is given once: inside recent messages, nowhere else.
    assert card.content.count("platypus") == 1


def test_card_sections_topics_summary_and_relevant_information(memory: Memory) -> None:
    thread = _maya(memory)
    memory.store.put(
        ("users", "maya", "memories"),
        "pref-1",
        {"content": "Maya prefers short answers about invoice reconciliation", "type": "preference"},
    )
    card = thread.get_context_card(except_last_messages=2, query="invoice reconciliation ledger")
    root = _parse(card.content)
    topics = [t.text for t in root.findall("topics/topic")]
    assert topics and any("invoice" in (t or "") or "reconciliation" in (t or "") for t in topics)
    summary = root.find("summary")
    assert summary is not None and "invoice reconciliation" in (summary.text or "")
    assert summary.get("revision") == str(card.summary_revision) == "1"
    records = {r.get("record_id"): r for r in root.findall("relevant_information/record")}
    assert "pref-1" in records and records["pref-1"].get("type") == "preference"
    assert any(rid in records for rid in ("u1", "u2", "a1", "a2"))
    assert card.to_message().type == "human"  # a user-role message, never the system role
    assert not isinstance(card.to_message(), SystemMessage)


def test_types_metadata_filter_and_max_relevant_results(in_memory: Memory) -> None:
    thread = _maya(in_memory)
    in_memory.store.put(
        ("users", "maya", "memories"), "fact-1", {"content": "ledger enrichment owner is Ana", "type": "fact"}
    )
    only_facts = thread.get_context_card(except_last_messages=2, types=["fact"], query="ledger enrichment")
    assert [r.id for r in only_facts.records] == ["fact-1"]
    failures = thread.get_context_card(
        except_last_messages=2, types=["message"], metadata_filter={"topic": "failure"}, query="ledger"
    )
    assert [r.id for r in failures.records] == ["u2"]
    one = thread.get_context_card(except_last_messages=2, max_relevant_results=1, query="ledger enrichment")
    assert len(one.records) == 1
    none = thread.get_context_card(except_last_messages=2, max_relevant_results=0)
    assert none.records == () and "<relevant_information>" not in none.content


def test_default_query_is_the_latest_user_message(in_memory: Memory) -> None:
    thread = _maya(in_memory)
    thread.add_messages(
        [{"role": "user", "content": "Which step of the ledger enrichment fails?", "id": "u4"}]
    )
    card = thread.get_context_card(except_last_messages=0)
    ids = [r.id for r in card.records]
    assert "u4" not in ids  # the question itself is not recalled
    assert ids and ids[0] in {"u2", "a2"}


def test_card_is_byte_identical_between_summary_refreshes(memory: Memory) -> None:
    thread = _maya(memory, frequency=4)
    first = thread.get_context_card(except_last_messages=2)
    assert thread.get_context_card(except_last_messages=2).content == first.content
    # The same boundary (one more message, one more excluded): the very same bytes.
    query = "invoice reconciliation ledger"
    before = thread.get_context_card(except_last_messages=2, query=query).content
    thread.add_messages([{"role": "assistant", "content": "Anything else about the ledger?", "id": "a3b"}])
    assert thread.get_context_card(except_last_messages=3, query=query).content == before
    thread.add_messages([{"role": "user", "content": "No.", "id": "u3b"}])
    first = thread.get_context_card(except_last_messages=4)
    # Fewer than `frequency` new messages: the summary revision and its text stay as they were.
    thread.add_messages(
        [{"role": "user", "content": "One more fact: the cluster is in Frankfurt.", "id": "u4"}]
    )
    later = thread.get_context_card(except_last_messages=2)
    assert later.summary_revision == first.summary_revision
    assert later.summary == first.summary and later.topics == first.topics
    thread.add_messages([{"role": "assistant", "content": f"ok {i}", "id": f"x{i}"} for i in range(4)])
    refreshed = thread.get_context_card(except_last_messages=2)
    assert refreshed.summary_revision == first.summary_revision + 1
    assert "Frankfurt" in refreshed.summary


def test_card_is_the_same_from_another_client_on_the_same_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with Memory.from_url(url, settings=SETTINGS) as one:
        content = _maya(one).get_context_card(except_last_messages=2).content
    with Memory.from_url(url, settings=SETTINGS) as two:
        assert two.get_thread("maya-thread").get_context_card(except_last_messages=2).content == content


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budget=st.integers(min_value=30, max_value=700),
    n=st.integers(min_value=0, max_value=30),
    recent=st.integers(min_value=0, max_value=6),
)
def test_the_card_never_exceeds_its_token_budget(budget: int, n: int, recent: int) -> None:
    memory = Memory.from_url("memory://", settings=SETTINGS)
    thread = memory.thread("b", user_id="u", context_summary_update_frequency=1)
    words = [
        "invoice",
        "ledger",
        "workflow",
        "cron",
        "graph",
        "reconciliation",
        "enrichment",
        "failing",
        "step",
        "Maya",
    ]
    thread.add_messages(
        [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": " ".join(words[(i + j) % len(words)] for j in range(5 + i % 17)) + f" fact {i}.",
                "id": f"m{i}",
            }
            for i in range(n)
        ]
    )
    card = thread.get_context_card(
        except_last_messages=recent, max_recent_messages=recent, token_budget=budget
    )
    assert memory.count_text(card.content) <= budget if card.content else True
    assert card.token_count <= budget
    if card.content:
        _parse(card.content)  # still well-formed after cutting


def test_a_summary_too_long_for_the_card_is_cut_visibly(in_memory: Memory) -> None:
    thread = in_memory.thread("long", user_id="u", context_summary_update_frequency=1)
    thread.add_messages(
        [
            {
                "role": "user",
                "content": f"My project number {i} is called Apollo{i} in Berlin.",
                "id": f"m{i}",
            }
            for i in range(40)
        ]
    )
    card = thread.get_context_card(except_last_messages=0, max_relevant_results=0, token_budget=120)
    assert "(truncated)" in card.summary and card.token_count <= 120


def test_card_message_is_not_a_system_message(in_memory: Memory) -> None:
    card = _maya(in_memory).get_context_card(except_last_messages=2)
    message = card.to_message()
    assert isinstance(message, HumanMessage) and message.name == "memory_context_card"


def test_cards_and_recall_prefer_records_that_add_something(in_memory: Memory) -> None:
    thread = in_memory.thread("mmr", user_id="u")
    questions = [f"Quick check: where did my sister move to? ({i})" for i in range(4)]
    thread.add_messages(
        [
            *({"role": "user", "content": q, "id": f"q{i}"} for i, q in enumerate(questions)),
            {"role": "user", "content": "My sister moved to Trondheim in May.", "id": "fact"},
            {"role": "user", "content": "Quick check: where did my sister move to?", "id": "now"},
        ]
    )
    plain = in_memory.search("Quick check: where did my sister move to?", thread_id="mmr", k=3)
    recall = thread.recall(
        "Quick check: where did my sister move to?", 3, exclude_ids=["now"], token_budget=500
    )
    card = thread.get_context_card(max_relevant_results=3)
    assert "fact" in {r.id for r in recall.records} and "fact" in {r.id for r in card.records}
    assert len({r.id for r in recall.records}) == 3
    assert len(plain) == 3  # plain search is ranking only (no diversity step)


def test_diversify_is_deterministic_and_keeps_the_best_first() -> None:
    from remem.memory._card import diversify
    from remem.memory._records import MemoryRecord

    records = [
        MemoryRecord(id="a", type="message", content="where did my sister move", score=1.0),
        MemoryRecord(id="b", type="message", content="where did my sister move again", score=0.9),
        MemoryRecord(id="c", type="fact", content="sister lives in Trondheim", score=0.5),
    ]
    picked = diversify(records, 2)
    assert [r.id for r in picked] == ["a", "c"] == [r.id for r in diversify(records, 2)]
    assert diversify(records, 5) and len(diversify(records, 5)) == 3
    assert diversify(records[:1], 3) == records[:1]


# --- long threads: a card's summary catches up a page at a time, then reads only what is new -------


class CountingStore(InMemoryStore):
    """LangGraph's in-memory store, noting the namespace of every item read by key."""

    def __init__(self) -> None:
        super().__init__(index=index_config(SETTINGS))  # type: ignore[arg-type]
        self.reads: list[tuple[str, ...]] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.reads.extend(op.namespace for op in ops if isinstance(op, GetOp))
        return super().batch(ops)


@dataclass
class RecordingSummarizer:
    """The extractive summariser, noting the ids of the messages each call was given."""

    inner: ExtractiveSummarizer = field(default_factory=ExtractiveSummarizer)
    calls: list[list[str]] = field(default_factory=list)

    def summarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        self.calls.append([str(m.id) for m in messages])
        return self.inner.summarize(previous, messages)

    async def asummarize(self, previous: str, messages: Sequence[BaseMessage]) -> SummaryResult:
        return self.summarize(previous, messages)


def _notes(start: int, n: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"My note {i}: locker {i % 97} is in building {i % 13}."
            if i % 2 == 0
            else f"Noted {i}.",
            "id": f"m{i}",
        }
        for i in range(start, start + n)
    ]


@pytest.mark.parametrize("n", [1, 511, 513, 1200])
def test_a_long_backlog_is_summarised_as_one_call_would(n: int) -> None:
    summarizer = RecordingSummarizer()
    memory = Memory(CountingStore(), summarizer=summarizer, context_summary_update_frequency=1)
    thread = memory.thread("long", user_id="u")
    thread.add_messages(_notes(0, n))
    card = thread.get_context_card(max_relevant_results=0, token_budget=20_000)
    everything = [m.to_langchain() for m in thread.messages()]
    assert card.summary == ExtractiveSummarizer().summarize("", everything).text
    # Read and summarised in pages, each message once and in order.
    assert [i for call in summarizer.calls for i in call] == [str(m.id) for m in everything]
    assert max(len(call) for call in summarizer.calls) <= SUMMARY_PAGE


@pytest.mark.parametrize("history", [100, 1300])
def test_a_card_after_new_messages_reads_and_summarises_only_those(history: int) -> None:
    store, summarizer = CountingStore(), RecordingSummarizer()
    memory = Memory(store, summarizer=summarizer, context_summary_update_frequency=1)
    thread = memory.thread("long", user_id="u")
    thread.add_messages(_notes(0, history))
    thread.get_context_card()
    thread.add_messages(_notes(history, 3))
    store.reads.clear()
    summarizer.calls.clear()
    card = thread.get_context_card()
    assert summarizer.calls == [[f"m{i}" for i in range(history, history + 3)]]
    # The three new messages, the latest user message (the default query) and the neighbouring turn
    # of each recalled message (at most one per candidate record): not the history.
    partners = store.reads.count(messages_ns("long")) - 4
    assert 0 <= partners <= CARD_RECORDS and card.records


# --- evidence first: dates, speakers, neighbours, budgets, time words --------------------------------

_FACTS = [
    ("2023-03-04T10:00:00Z", "Caroline", "I went hiking in the Alps with my cousin."),
    ("2023-03-04T10:01:00Z", "Melanie", "The Alps in March must have been cold!"),
    ("2023-05-08T18:30:00Z", "Caroline", "I went hiking in the Pyrenees with my cousin."),
    ("2023-05-08T18:31:00Z", "Melanie", "The Pyrenees sound lovely, which trail was it?"),
    ("2023-05-20T09:00:00Z", "Caroline", "We finally booked the trip to Lisbon."),
    ("2023-05-20T09:01:00Z", "Melanie", "Lisbon is wonderful, enjoy it!"),
    ("2023-06-02T08:00:00Z", "Caroline", "Back from the Lisbon trip, I bought a blue ceramic tile there."),
    ("2023-06-02T08:01:00Z", "Melanie", "A tile from Lisbon? What a souvenir."),
    ("2023-07-03T12:00:00Z", "Caroline", "Hey Melanie! Thanks so much!"),
    ("2023-07-03T12:01:00Z", "Melanie", "Thanks, Caroline!"),
]


def _dated(memory: Memory, thread_id: str = "dated") -> Thread:
    thread = memory.thread(thread_id, user_id="caroline")
    thread.add_messages(
        [
            {
                "role": "user" if speaker == "Caroline" else "assistant",
                "content": text,
                "id": f"d{i}",
                "timestamp": when,
                "metadata": {"speaker": speaker},
            }
            for i, (when, speaker, text) in enumerate(_FACTS)
        ]
    )
    return thread


def test_every_record_in_the_card_shows_its_speaker_and_date(memory: Memory) -> None:
    card = _dated(memory).get_context_card(query="hiking with my cousin")
    records = _parse(card.content).findall("relevant_information/record")
    assert records
    by_id = {r.get("record_id"): r for r in records}
    assert by_id["d2"].get("speaker") == "Caroline" and by_id["d2"].get("date") == "8 May 2023"
    assert by_id["d0"].get("date") == "4 March 2023"
    for record in records:
        assert record.get("speaker") in {"Caroline", "Melanie"} and record.get("date")
    # The stored text is the message's own: the speaker and the date are labels, not content.
    assert next(m for m in memory.get_thread("dated").messages() if m.id == "d2").content == _FACTS[2][2]
    assert (by_id["d2"].text or "").endswith(_FACTS[2][2]) and "2023" not in (by_id["d2"].text or "")


def test_the_speaker_and_the_date_are_searchable_with_the_message(memory: Memory) -> None:
    _dated(memory)
    found = [r.id for r in memory.search("Melanie", thread_id="dated", k=8)]
    # Melanie's turns (none of them says her name), found by the name in their keyword document (or, on a
    # store without one, by its vector), and the one of Caroline's that says it ("Hey Melanie!")
    assert {"d1", "d3", "d5", "d7", "d9", "d8"} <= set(found), found
    by_date = memory.search("what happened on 20 May 2023", thread_id="dated", k=2)
    assert {r.id for r in by_date} == {"d4", "d5"}


@pytest.mark.parametrize(
    ("question", "answer", "twin"),
    [
        ("Where did I go hiking last May?", "d2", "d0"),  # from the thread's latest message (July 2023)
        ("Where did I go hiking in March?", "d0", "d2"),
        ("Where did Caroline go hiking in March 2023?", "d0", "d2"),
        ("Where did I go hiking two months ago?", "d2", "d0"),
        ("Which souvenir did I buy after the trip?", "d6", None),
    ],
)
def test_a_question_with_time_words_finds_the_dated_turn(
    memory: Memory, question: str, answer: str, twin: str | None
) -> None:
    thread = _dated(memory)
    found = [r.id for r in memory.search(question, thread_id="dated", k=10)]
    assert answer in found[:2]
    if twin is not None:  # the same words, said on another date: after the one asked about
        assert found.index(answer) < found.index(twin)
    card = [r.id for r in thread.get_context_card(query=question, token_budget=400).records]
    assert answer in card[:2]  # the card's first exchange
    if twin in card:
        assert card.index(answer) < card.index(twin)


def test_a_greeting_weighs_nothing_in_a_query(memory: Memory) -> None:
    _dated(memory)
    assert memory.search("Thanks!", thread_id="dated") == []
    assert memory.search("Hi! Hello!", thread_id="dated") == []
    plain = memory.search("Where did I go hiking with my cousin?", thread_id="dated", k=4)
    polite = memory.search("Hey! Thanks. Where did I go hiking with my cousin?", thread_id="dated", k=4)
    assert [r.id for r in polite] == [r.id for r in plain] and plain


def test_a_hit_comes_with_the_other_half_of_its_exchange(memory: Memory) -> None:
    thread = _dated(memory)
    card = thread.get_context_card(query="blue ceramic tile", token_budget=2000)
    ids = [r.id for r in card.records]
    assert ids[:2] == ["d6", "d7"]  # the answer right after its question, in the order they were said
    reply = thread.get_context_card(query="what a souvenir", token_budget=2000)
    assert [r.id for r in reply.records][:2] == ["d6", "d7"]  # a reply brings its question
    # A statement and a reply that says nothing are no exchange: a "Thanks, Caroline!" does not come along.
    from remem.memory._search import _exchange

    def said(text: str, role: str = "user") -> MemoryRecord:
        return MemoryRecord(id=text, type="message", content=f"{role}: {text}", score=0.0, role=role)

    assert _exchange(said("Which trail was it?"), said("The GR10, three days.", "assistant"))
    assert _exchange(said("The GR10, three days.", "assistant"), said("Which trail was it?"))
    assert not _exchange(said("I walked the GR10."), said("Thanks for sharing that!", "assistant"))
    assert not _exchange(said("Did you like it?"), said("Thanks, Caroline!", "assistant"))
    assert not _exchange(said("I walked the GR10."), said("It took three days.", "assistant"))


def _long_conversation(memory: Memory, n: int = 160) -> Thread:
    thread = memory.thread("long-talk", user_id="u", context_summary_update_frequency=1)
    thread.add_messages(
        [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": (
                    f"My {['sister', 'cousin', 'uncle', 'friend'][i % 4]} moved to city {i % 23} "
                    f"and works as a {['nurse', 'baker', 'welder'][i % 3]} there since {2000 + i % 20}."
                    if i % 2 == 0
                    else f"Good to know about city {i % 23}, a {['nurse', 'baker', 'welder'][i % 3]}."
                ),
                "id": f"t{i}",
                "timestamp": f"2023-{1 + i // 20:02d}-{1 + i % 20:02d}T10:00:00Z",
            }
            for i in range(n)
        ]
    )
    return thread


def test_bigger_budgets_give_bigger_cards_with_more_evidence(in_memory: Memory) -> None:
    thread = _long_conversation(in_memory)
    cards = [
        thread.get_context_card(query="where does my sister work", token_budget=b) for b in (500, 1000, 2000)
    ]
    assert [len(c.records) for c in cards] == sorted(len(c.records) for c in cards)
    assert len(cards[0].records) < len(cards[1].records) < len(cards[2].records)
    for card, budget in zip(cards, (500, 1000, 2000), strict=True):
        assert budget * 0.8 < card.token_count <= budget  # the budget is spent, not left idle
        # Evidence first: the summary never takes more than its share beside records.
        assert in_memory.count_text(card.summary) <= budget // 2
    assert len({c.content for c in cards}) == 3


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budgets=st.lists(st.integers(min_value=60, max_value=1900), min_size=2, max_size=2, unique=True),
    n=st.integers(min_value=0, max_value=60),
    query=st.sampled_from(["sister city", "baker since 2005", "what happened last May?", "Thanks!"]),
)
def test_a_bigger_budget_holds_the_evidence_of_a_smaller_one(budgets: list[int], n: int, query: str) -> None:
    memory = Memory.from_url("memory://", settings=SETTINGS)
    thread = _long_conversation(memory, n)
    small, big = (thread.get_context_card(query=query, token_budget=b) for b in sorted(budgets))
    assert small.token_count <= min(budgets) and big.token_count <= max(budgets)
    assert {r.id for r in small.records} <= {r.id for r in big.records}
    for card in (small, big):
        if card.content:
            for record in _parse(card.content).findall("relevant_information/record"):
                assert record.get("date") and record.get("speaker") in {"user", "assistant"}


def test_the_card_is_byte_stable_between_refreshes_with_dates_and_neighbours(tmp_path: Path) -> None:
    with Memory.from_url(f"sqlite:///{tmp_path / 'stable.db'}", settings=SETTINGS) as memory:
        thread = _dated(memory)
        first = thread.get_context_card(query="hiking trip Lisbon", token_budget=600)
        assert first.records and 'date="' in first.content
        assert thread.get_context_card(query="hiking trip Lisbon", token_budget=600).content == first.content
    with Memory.from_url(f"sqlite:///{tmp_path / 'stable.db'}", settings=SETTINGS) as again:
        card = again.get_thread("dated").get_context_card(query="hiking trip Lisbon", token_budget=600)
        assert card.content == first.content


def test_greetings_are_never_topics_or_summary_lines(in_memory: Memory) -> None:
    card = _dated(in_memory).get_context_card(token_budget=2000, query="hiking")
    assert card.summary and "Thanks" not in card.summary and "Hey Melanie" not in card.summary
    for topic in card.topics:
        assert not {"hey", "thanks", "caroline!", "hi"} & set(topic.split())


def _naive_diversify(records: Sequence[MemoryRecord], k: int, lam: float = 0.5) -> list[MemoryRecord]:
    """Maximal marginal relevance the plain way: every remaining record's gain computed at every step."""
    from remem.memory._card import _IGNORED, _WORDS, _jaccard

    if len(records) <= 1 or k <= 1:
        return list(records[:k])
    n = len(records)
    vocabulary: dict[str, int] = {}
    words = [
        sum(
            1 << vocabulary.setdefault(w, len(vocabulary))
            for w in set(_WORDS.findall(r.content.lower())) - _IGNORED
        )
        for r in records
    ]
    chosen: list[int] = []
    remaining = list(range(n))
    while remaining and len(chosen) < k:

        def gain(i: int) -> tuple[float, int]:
            overlap = max((_jaccard(words[i], words[j]) for j in chosen), default=0.0)
            return (lam * (1.0 - i / n) - (1 - lam) * overlap, -i)

        best = max(remaining, key=gain)
        chosen.append(best)
        remaining.remove(best)
    return [records[i] for i in chosen]


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(
        st.lists(
            st.sampled_from(["sister", "moved", "Porto", "cat", "Miso", "job", "nurse", "the"]), max_size=5
        ),
        max_size=25,
    ),
    k=st.integers(min_value=0, max_value=30),
)
def test_lazy_diversify_picks_what_plain_mmr_picks(texts: list[list[str]], k: int) -> None:
    from remem.memory._card import diversify

    records = [
        MemoryRecord(id=f"r{i}", type="message", content=" ".join(words), score=0.0)
        for i, words in enumerate(texts)
    ]
    assert [r.id for r in diversify(records, k)] == [r.id for r in _naive_diversify(records, k)]


def _words(text: str) -> int:
    return len(text.split())


def test_a_long_record_is_shown_by_the_sentences_that_hold_the_query_words() -> None:
    from remem.memory._card import TRUNCATED, excerpt

    filler = " ".join(f"Sentence {n} talks about the weather and nothing else." for n in range(30))
    text = f"{filler} My sister Dana moved to Lisbon in March. {filler}"
    shown, cut = excerpt(text, frozenset({"dana", "lisbon"}), 30, _words)
    assert cut and "My sister Dana moved to Lisbon in March." in shown
    assert shown.endswith(TRUNCATED) and _words(shown) <= 30
    head, _ = excerpt(text, frozenset(), 30, _words)  # no query: its head, as before
    assert head.startswith("Sentence 0") and "Lisbon" not in head
    assert excerpt("short text", frozenset({"dana"}), 30, _words) == ("short text", False)


def test_a_card_shows_the_part_of_a_long_turn_the_question_asks_about() -> None:
    memory = Memory.from_url("memory://", settings=SETTINGS)
    filler = " ".join(f"Point {n} is about compilers and parsers." for n in range(60))
    thread = memory.thread("long-turn", user_id="u")
    thread.add_messages(
        [
            {"role": "user", "content": "Tell me about compilers."},
            {
                "role": "assistant",
                "content": f"{filler} By the way, your dentist appointment is on Friday. {filler}",
            },
            {"role": "user", "content": "Thanks."},
        ]
    )
    card = thread.get_context_card(query="When is my dentist appointment?", token_budget=1000)
    assert "dentist appointment is on Friday" in card.content
    assert "Point 59" not in card.content
