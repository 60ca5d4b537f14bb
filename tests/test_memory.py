"""The memory client: threads, messages, search and summaries, on LangGraph's InMemoryStore, SQLite and
PostgreSQL (real databases; only the embedder is a deterministic fake)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from remem import Memory, NotFoundError, RememUsageError
from remem.errors import ArgumentTypeError, InvalidMessagesError
from remem.memory import MemoryRecord, StoredMessage, Thread
from remem.testing import offline_settings

SETTINGS = offline_settings()


@pytest.fixture
def memory(memory_url: str) -> Iterator[Memory]:
    with Memory.from_url(memory_url, settings=SETTINGS) as mem:
        yield mem


def _conversation(n: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"message number {i} about topic {i % 3}",
            "id": f"m{i}",
        }
        for i in range(n)
    ]


def test_add_messages_keeps_ids_order_and_fields(memory: Memory) -> None:
    thread = memory.thread("t1", user_id="maya", agent_id="helper")
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    added = thread.add_messages(
        [
            {
                "role": "user",
                "content": "hello",
                "id": "u-1",
                "timestamp": when,
                "metadata": {"channel": "web"},
            },
            AIMessage(content="hi Maya", id="a-1"),
            HumanMessage(content="no id given"),
        ]
    )
    assert [m.seq for m in added] == [0, 1, 2]
    stored = thread.messages()
    assert [m.id for m in stored[:2]] == ["u-1", "a-1"]
    assert stored[2].id  # a fresh id was given
    assert [m.role for m in stored] == ["user", "assistant", "user"]
    assert stored[0].timestamp == "2026-01-02T03:04:05Z"
    assert stored[0].metadata == {"channel": "web"}
    assert [m.content for m in thread.messages(last=2)] == ["hi Maya", "no id given"]
    assert thread.info().message_count == 3


def test_the_same_message_sent_again_is_stored_once(memory: Memory) -> None:
    thread = memory.thread("t1", user_id="maya")
    first = _conversation(4)
    stored = thread.add_messages(first)
    assert len(stored) == 4
    assert thread.add_messages(first) == stored  # a retry returns what was stored, not a second copy
    again = thread.add_messages([*first, {"role": "user", "content": "new", "id": "m9"}, first[0]])
    assert [(m.id, m.seq) for m in again] == [("m0", 0), ("m1", 1), ("m2", 2), ("m3", 3), ("m9", 4)]
    assert [m.id for m in thread.messages()] == ["m0", "m1", "m2", "m3", "m9"]


def test_long_threads_span_order_chunks(memory: Memory) -> None:
    thread = memory.thread("long")
    for start in range(0, 1100, 275):
        thread.add_messages(_conversation(1100)[start : start + 275])
    ids = [m.id for m in thread.messages()]
    assert ids == [f"m{i}" for i in range(1100)]
    assert [m.id for m in thread.messages(last=3)] == ["m1097", "m1098", "m1099"]


def test_reopening_a_thread_keeps_its_user_and_refuses_another(memory: Memory) -> None:
    memory.thread("t1", user_id="maya", agent_id="helper")
    reopened = memory.thread("t1")
    assert (reopened.user_id, reopened.agent_id) == ("maya", "helper")
    assert memory.get_thread("t1").user_id == "maya"
    with pytest.raises(RememUsageError, match="belongs to user 'maya'"):
        memory.thread("t1", user_id="someone-else")
    with pytest.raises(NotFoundError, match=r"memory\.thread"):
        memory.get_thread("never-opened")


@pytest.mark.parametrize("bad", ["", "nul\x00", "lone\ud800"])
def test_bad_labels_are_usage_errors(memory: Memory, bad: str) -> None:
    with pytest.raises(RememUsageError, match="thread_id"):
        memory.thread(bad)
    with pytest.raises(RememUsageError, match="user_id"):
        memory.thread("t1", user_id=bad)


@pytest.mark.parametrize("thread_id", ["tenant.42.chat", "maya@example.com", "%2E", "a%2Eb", "t.."])
def test_ids_with_dots_or_escapes_work_as_stock_thread_ids_do(memory: Memory, thread_id: str) -> None:
    user = "maya@example.com"
    thread = memory.thread(thread_id, user_id=user)
    thread.add_messages([{"role": "user", "content": "my parrot is called Biscuit", "id": "h1"}])
    plain = memory.thread("a", user_id=user)  # "%2E" is not the label of "." nor of any other id
    plain.add_messages([{"role": "user", "content": "nothing here", "id": "p1"}])
    again = memory.get_thread(thread_id)
    assert (again.thread_id, again.user_id) == (thread_id, user)
    assert [m.content for m in again.messages()] == ["my parrot is called Biscuit"]
    hits = memory.search("parrot Biscuit", thread_id=thread_id, k=5)
    assert [h.id for h in hits] == ["h1"]
    assert memory.thread(thread_id, user_id=user).info().message_count == 1
    with pytest.raises(NotFoundError):
        memory.get_thread(thread_id + ".")


def test_bad_messages_say_what_to_send(memory: Memory) -> None:
    thread = memory.thread("t1")
    with pytest.raises(RememUsageError, match="role"):
        thread.add_messages([{"role": "wizard", "content": "x"}])
    with pytest.raises(RememUsageError, match="content"):
        thread.add_messages([{"role": "user"}])
    with pytest.raises(RememUsageError, match="list"):
        thread.add_messages({"role": "user", "content": "x"})  # type: ignore[arg-type]
    assert thread.messages() == []


@pytest.fixture(scope="module")
def sqlite_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Thread]:
    url = f"sqlite:///{tmp_path_factory.mktemp('args') / 'memory.db'}"
    with Memory.from_url(url, settings=SETTINGS) as mem:
        thread = mem.thread("t1", user_id="maya")
        thread.add_messages([{"role": "user", "content": "I like green tea", "id": "m1"}])
        yield thread


_TYPE, _VALUE, _MESSAGES = ArgumentTypeError, RememUsageError, InvalidMessagesError
# (call on a thread, the error, words its message must hold): each raised a bare TypeError or
# AttributeError from deep inside a plan, read a text as a list of its characters, or stored a wrong value.
_WRONG_ARGUMENTS: dict[str, tuple[Callable[[Thread], object], type[Exception], str]] = {
    "search k text": (
        lambda t: t.memory.search("tea", user_id="maya", k="a"),
        _TYPE,
        r"k takes a whole number",
    ),
    "search k float": (lambda t: t.memory.search("tea", user_id="maya", k=1.5), _TYPE, r"e\.g\. k=5"),
    "search k None": (lambda t: t.memory.search("tea", user_id="maya", k=None), _TYPE, "whole number"),
    "search k bool": (lambda t: t.memory.search("tea", user_id="maya", k=True), _TYPE, "whole number"),
    "search k negative": (
        lambda t: t.memory.search("tea", user_id="maya", k=-1),
        _VALUE,
        "k must be 0 or more",
    ),
    "search query None": (lambda t: t.memory.search(None, user_id="maya"), _TYPE, r"query takes a text"),
    "search query int": (lambda t: t.memory.search(3, user_id="maya"), _TYPE, r"query takes a text"),
    "search types int": (lambda t: t.memory.search("tea", user_id="maya", types=3), _TYPE, r"types=\['fact'"),
    "search user int": (lambda t: t.memory.search("tea", user_id=3), _TYPE, "user_id takes a text"),
    "search thread int": (lambda t: t.memory.search("tea", thread_id=3), _TYPE, "thread_id takes a text"),
    "search nobody": (lambda t: t.memory.search("tea"), _VALUE, "say whose memory"),
    "thread id int": (lambda t: t.memory.thread(3), _TYPE, "thread_id takes a text"),
    "thread agent int": (lambda t: t.memory.thread("t2", agent_id=3), _TYPE, "agent_id takes a text"),
    "thread frequency text": (
        lambda t: t.memory.thread("t2", context_summary_update_frequency="a"),
        _TYPE,
        "context_summary_update_frequency takes a whole number",
    ),
    "thread frequency 0": (
        lambda t: t.memory.thread("t2", context_summary_update_frequency=0),
        _VALUE,
        "must be 1 or more",
    ),
    "get_thread int": (lambda t: t.memory.get_thread(3), _TYPE, "thread_id takes a text"),
    "add role unknown": (
        lambda t: t.add_messages([{"role": "bot", "content": "x"}]),
        _MESSAGES,
        "use one of user",
    ),
    "add role int": (lambda t: t.add_messages([{"role": 3, "content": "x"}]), _MESSAGES, "use one of user"),
    "add one message": (lambda t: t.add_messages({"role": "user", "content": "x"}), _VALUE, "wrap a single"),
    "add None": (lambda t: t.add_messages(None), _VALUE, "a list of messages"),
    "add an int": (lambda t: t.add_messages([3]), _MESSAGES, "send a dict"),
    "add id list": (
        lambda t: t.add_messages([{"role": "user", "content": "x", "id": ["a"]}]),
        _MESSAGES,
        "give a text such as 'm1'",
    ),
    "add timestamp int": (
        lambda t: t.add_messages([{"role": "user", "content": "x", "timestamp": 3}]),
        _MESSAGES,
        "ISO 8601",
    ),
    "messages last text": (lambda t: t.messages(last="a"), _TYPE, "last takes a whole number"),
    "messages last float": (lambda t: t.messages(last=1.5), _TYPE, "last takes a whole number"),
    "summary except_last text": (lambda t: t.get_summary(except_last="a"), _TYPE, "except_last takes"),
    "summary budget text": (lambda t: t.get_summary(token_budget="a"), _TYPE, "token_budget=1000"),
    "summary budget 0": (lambda t: t.get_summary(token_budget=0), _VALUE, "token_budget must be 1 or more"),
    "card except text": (
        lambda t: t.get_context_card(except_last_messages="a"),
        _TYPE,
        "except_last_messages",
    ),
    "card recent text": (lambda t: t.get_context_card(max_recent_messages="a"), _TYPE, "max_recent_messages"),
    "card results text": (
        lambda t: t.get_context_card(max_relevant_results="a"),
        _TYPE,
        "max_relevant_results",
    ),
    "card budget text": (lambda t: t.get_context_card(token_budget="a"), _TYPE, "token_budget=1500"),
    "card types int": (lambda t: t.get_context_card(types=3, query="tea"), _TYPE, "types takes a list"),
    "card filter int": (lambda t: t.get_context_card(metadata_filter=3, query="tea"), _TYPE, "a dict"),
    "card query int": (lambda t: t.get_context_card(query=3), _TYPE, r"a text \(str\) or None"),
    "recall query int": (lambda t: t.recall(3), _TYPE, "query takes a text"),
    "recall k text": (lambda t: t.recall("tea", k="a"), _TYPE, "how many records to recall"),
    "recall k negative": (lambda t: t.recall("tea", k=-1), _VALUE, "k must be 0 or more"),
    "recall exclude text": (lambda t: t.recall("tea", exclude_ids="m1"), _TYPE, r"exclude_ids=\['m1'"),
    "recall exclude int": (lambda t: t.recall("tea", exclude_ids=3), _TYPE, "a list of message ids"),
    "recall budget 0": (lambda t: t.recall("tea", token_budget=0), _VALUE, "token_budget must be 1 or more"),
    "count_text int": (lambda t: t.memory.count_text(3), _TYPE, "takes a text"),
    "Memory frequency 0": (
        lambda t: Memory(t.memory.store, context_summary_update_frequency=0),
        _VALUE,
        "must be 1 or more",
    ),
    "Memory lease text": (lambda t: Memory(t.memory.store, thread_lease_timeout="5"), _TYPE, "a number"),
    "Memory lease negative": (lambda t: Memory(t.memory.store, thread_lease_timeout=-1), _VALUE, "0 or more"),
    "Memory store not a store": (lambda t: Memory("sqlite:///x.db"), _TYPE, r"Memory\.from_url\(url\)"),
    "Memory summarizer": (lambda t: Memory(t.memory.store, summarizer="llm"), _TYPE, "a remem Summarizer"),
    "Memory token counter": (lambda t: Memory(t.memory.store, token_counter=4), _TYPE, "token_counter takes"),
    "Memory meter": (lambda t: Memory(t.memory.store, meter="ledger"), _TYPE, "remem.usage.Meter"),
    "from_url settings": (lambda t: Memory.from_url("memory://", settings={}), _TYPE, "remem.Settings"),
}


@pytest.mark.parametrize("case", sorted(_WRONG_ARGUMENTS))
def test_wrong_arguments_are_remem_errors_that_say_what_to_pass(sqlite_thread: Thread, case: str) -> None:
    call, error, words = _WRONG_ARGUMENTS[case]
    with pytest.raises(error, match=words) as raised:
        call(sqlite_thread)
    assert isinstance(raised.value, RememUsageError)  # a ValueError too; a wrong type is also a TypeError
    assert not isinstance(raised.value, TypeError) or error is ArgumentTypeError
    assert [m.id for m in sqlite_thread.messages()] == ["m1"]  # nothing was written


async def test_the_async_twins_check_their_arguments_too(sqlite_thread: Thread) -> None:
    memory = sqlite_thread.memory
    with pytest.raises(ArgumentTypeError, match="k takes a whole number"):
        await memory.asearch("tea", user_id="maya", k="a")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="exclude_ids"):
        await sqlite_thread.arecall("tea", exclude_ids="m1")
    with pytest.raises(InvalidMessagesError, match="use one of user"):
        await sqlite_thread.aadd_messages([{"role": "bot", "content": "x"}])
    with pytest.raises(ArgumentTypeError, match="max_relevant_results"):
        await sqlite_thread.aget_context_card(max_relevant_results="a")  # type: ignore[arg-type]


_NOT_A_COUNT = st.one_of(
    st.integers(max_value=-1),
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=5),
    st.lists(st.integers(min_value=0, max_value=9), max_size=2),
    st.decimals(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=_NOT_A_COUNT, query=st.one_of(st.none(), st.integers(), st.binary(max_size=4), st.lists(st.text())))
def test_any_wrong_count_or_query_is_a_usage_error_never_a_bare_builtin(
    sqlite_thread: Thread, k: object, query: object
) -> None:
    memory = sqlite_thread.memory
    with pytest.raises(RememUsageError, match=r"^k (takes a whole number|must be 0 or more)"):
        memory.search("green tea", thread_id="t1", k=k)  # type: ignore[arg-type]
    with pytest.raises(RememUsageError, match=r"^last (takes a whole number|must be 0 or more)"):
        sqlite_thread.messages(last=k)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"^query takes a text"):
        memory.search(query, thread_id="t1")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"^query takes a text"):
        sqlite_thread.recall(query)  # type: ignore[arg-type]


def test_right_arguments_of_other_int_types_are_still_taken(sqlite_thread: Thread) -> None:
    np = pytest.importorskip("numpy")
    found = sqlite_thread.memory.search("green tea", thread_id="t1", k=np.int64(2))
    assert [r.id for r in found] == ["m1"]
    assert (
        sqlite_thread.memory.search("green tea", thread_id="t1", k=0) == []
    )  # 0: nothing, as the CLI's -k 0
    assert [m.id for m in sqlite_thread.messages(last=np.int32(1))] == ["m1"]
    assert sqlite_thread.recall("green tea", exclude_ids=("m1",)).records == ()


def test_search_returns_typed_records_from_messages_and_memories(memory: Memory) -> None:
    thread = memory.thread("t1", user_id="maya")
    thread.add_messages(
        [
            {"role": "user", "content": "My cat is called Miso", "id": "u1"},
            {"role": "assistant", "content": "Miso is a lovely name for a cat", "id": "a1"},
            {"role": "user", "content": "I deploy with Kubernetes on Fridays", "id": "u2"},
        ]
    )
    memory.store.put(
        ("users", "maya", "memories"),
        "mem-1",
        {"content": "Maya has a cat named Miso", "type": "fact", "source_message_ids": ["u1"]},
    )
    memory.store.put(("users", "maya", "memories"), "mem-2", {"content": "cat allergy", "status": "deleted"})
    records = memory.search("cat Miso", user_id="maya", thread_id="t1", k=5)
    assert all(isinstance(r, MemoryRecord) for r in records)
    by_id = {r.id: r for r in records}
    assert {"u1", "mem-1"} <= set(by_id)
    assert "mem-2" not in by_id  # deleted memories are never recalled
    assert by_id["u1"].type == "message" and by_id["u1"].source_message_ids == ("u1",)
    assert by_id["mem-1"].type == "fact" and by_id["mem-1"].source_message_ids == ("u1",)
    assert by_id["mem-1"].status == "active"
    # Messages come in the store's own order (a remem store ranks hybrid hits by fused rank), the ones
    # that share no word with the query left out (u2); every record's score is the value of that order.
    stock = memory.store.search(("threads", "t1", "messages"), query="cat Miso", limit=5)
    matching = [i.key for i in stock if isinstance(memory.store, InMemoryStore) or i.key != "u2"]
    assert [r.id for r in records if r.type == "message"] == matching
    scores = [r.score for r in records]
    assert scores == sorted(scores, reverse=True)
    only_facts = memory.search("cat Miso", user_id="maya", thread_id="t1", types=["fact"])
    assert [r.id for r in only_facts] == ["mem-1"]
    only_messages = memory.search("cat Miso", user_id="maya", thread_id="t1", types=["message"], k=1)
    assert len(only_messages) == 1 and only_messages[0].type == "message"
    with pytest.raises(RememUsageError, match="user_id"):
        memory.search("cat")


def test_summary_is_incremental_versioned_and_truncated_visibly(memory: Memory) -> None:
    thread = memory.thread("t1", user_id="maya")
    thread.add_messages(
        [
            {"role": "user", "content": "I'm Maya and I live in Lisbon.", "id": "u1"},
            {"role": "assistant", "content": "Nice to meet you.", "id": "a1"},
            {"role": "user", "content": "My deadline is Friday 14 March.", "id": "u2"},
        ]
    )
    first = thread.get_summary()
    assert first.revision == 1 and first.covered_count == 3
    assert "Lisbon" in first.text and "14 March" in first.text
    assert (first.first_message_id, first.last_message_id) == ("u1", "u2")
    assert thread.get_summary() == first  # nothing new: no new revision

    thread.add_messages([{"role": "user", "content": "My budget is 4000 euros.", "id": "u3"}])
    second = thread.get_summary()
    assert second.revision == 2 and second.based_on == 1 and second.covered_count == 4
    assert "Lisbon" in second.text and "4000" in second.text

    older = thread.get_summary(except_last=1)  # revision 1 covers exactly the first three
    assert older.revision == 1 and older.covered_count == 3

    revisions = thread.summaries()
    assert [(r.revision, r.covered_count, r.based_on) for r in revisions] == [(1, 3, 0), (2, 4, 1)]
    assert revisions[0].text == first.text  # earlier revisions are kept as they were
    short = thread.get_summary(token_budget=12)
    assert short.truncated and short.text.endswith("(truncated)")
    assert memory.count_text(short.text) <= 12
    assert short.revision == 2
    with pytest.raises(RememUsageError):
        thread.get_summary(except_last=-1)


def test_summary_uses_the_given_summariser_only_for_new_messages(memory: Memory) -> None:
    from remem.summarize import SummaryResult

    seen: list[list[str]] = []

    class Recording:
        def summarize(self, previous: str, messages: object) -> SummaryResult:
            texts = [m.text for m in messages]  # type: ignore[attr-defined]
            seen.append(texts)
            return SummaryResult(text=(previous + " | " if previous else "") + "; ".join(texts), model="rec")

        async def asummarize(self, previous: str, messages: object) -> SummaryResult:
            return self.summarize(previous, messages)

    memory.summarizer = Recording()
    thread = memory.thread("t1")
    thread.add_messages(_conversation(3))
    thread.get_summary()
    thread.add_messages([{"role": "user", "content": "fourth", "id": "m3"}])
    summary = thread.get_summary()
    assert len(seen) == 2 and seen[1] == ["fourth"]
    assert summary.text.endswith("fourth") and summary.model == "rec"


async def test_async_methods_match_the_sync_ones(memory: Memory) -> None:
    thread = await memory.athread("t-async", user_id="maya")
    added = await thread.aadd_messages(_conversation(6))
    assert [m.id for m in added] == [f"m{i}" for i in range(6)]
    assert await thread.aadd_messages(_conversation(6)) == added
    stored = await thread.amessages()
    assert stored == thread.messages()
    assert all(isinstance(m, StoredMessage) for m in stored)
    summary = await thread.aget_summary(except_last=2)
    assert await thread.asummaries() == thread.summaries()
    assert summary == thread.get_summary(except_last=2)
    card = await thread.aget_context_card(except_last_messages=2)
    assert card.content == thread.get_context_card(except_last_messages=2).content
    found = await memory.asearch("topic 1", thread_id="t-async", k=3)
    assert [r.id for r in found] == [r.id for r in memory.search("topic 1", thread_id="t-async", k=3)]
    assert (await memory.aget_thread("t-async")).user_id == "maya"
    assert (await thread.ainfo()).message_count == 6


def test_from_url_rejects_unknown_schemes() -> None:
    with pytest.raises(RememUsageError, match="sqlite:///PATH"):
        Memory.from_url("redis://localhost", settings=SETTINGS)
    with pytest.raises(RememUsageError, match="names no file"):  # the one URL parser's own message
        Memory.from_url("sqlite:///", settings=SETTINGS)


def test_turns_indexed_by_extraction_first_are_taken_into_the_thread(memory: Memory) -> None:
    from remem.extraction import MemoryExtractor

    turns = [
        HumanMessage(content="I live in Porto.", id="h1"),
        AIMessage(content="Porto is lovely.", id="a1"),
    ]
    MemoryExtractor(memory.store).run(turns, user_id="maya", thread_id="shared")  # indexes raw turns, no LLM
    thread = memory.thread("shared", user_id="maya")
    assert [m.id for m in thread.add_messages(turns)] == ["h1", "a1"]
    assert [m.id for m in thread.messages()] == ["h1", "a1"]
    assert [m.seq for m in thread.add_messages(turns)] == [0, 1]
    assert thread.info().message_count == 2


def test_superseded_memories_are_not_recalled(memory: Memory) -> None:
    memory.thread("t1", user_id="maya")
    ns = ("users", "maya", "memories")
    memory.store.put(
        ns, "old", {"content": "Maya lives in Lisbon", "kind": "fact", "valid": False, "status": "active"}
    )
    memory.store.put(
        ns, "new", {"content": "Maya lives in Porto", "kind": "fact", "valid": True, "status": "active"}
    )
    found = memory.search("where does Maya live", user_id="maya")
    assert [r.id for r in found] == ["new"] and found[0].type == "fact"


def test_search_returns_only_matches_scored_in_their_order_and_the_summary(memory: Memory) -> None:
    thread = memory.thread("t1", user_id="maya")
    thread.add_messages(
        [
            {"role": "user", "content": "预算是五百欧元", "id": "u1"},
            {"role": "assistant", "content": "好的。", "id": "a1"},
            {"role": "user", "content": "My parrot is called Biscuit", "id": "u2"},
            {"role": "assistant", "content": "好的。", "id": "a2"},
            *({"role": "user", "content": f"note {i} about kites", "id": f"n{i}"} for i in range(6)),
        ]
    )
    hits = memory.search("预算", thread_id="t1", k=10)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    from remem.store import RememStoreBase

    if isinstance(memory.store, RememStoreBase):  # memory:// is LangGraph's store: vector only, all match
        assert [h.id for h in hits] == ["u1"]
        assert memory.search("zanzibar", thread_id="t1") == []
        assert [h.id for h in memory.search("Biscuit", thread_id="t1")] == ["u2"]
    summary = thread.get_summary(except_last=6)  # the extractive summariser: the first 4 messages
    if "Biscuit" in summary.text:
        found = memory.search("Biscuit", thread_id="t1", k=20)
        assert found[-1].type == "summary" and found[-1].id == f"summary:{summary.revision}"
        assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ({"role": "user", "content": ""}, "empty content"),
        ({"role": "user", "content": "  \n"}, "empty content"),
        ({"role": "tool", "content": "42"}, "tool_call_id"),
        ({"role": "user", "content": "hi", "timestamp": "yesterday-ish"}, "not a date"),
        ({"role": "user", "content": "a\ud800b"}, "lone surrogate"),
        (HumanMessage(content=""), "empty content"),
    ],
)
def test_add_messages_refuses_what_it_could_not_keep_faithfully(
    memory: Memory, message: object, said: str
) -> None:
    thread = memory.thread("t1")
    with pytest.raises(InvalidMessagesError, match=said):
        thread.add_messages([{"role": "user", "content": "kept?"}, message])
    assert thread.messages() == []  # nothing of the batch was written
    ok = thread.add_messages(
        [
            AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),
            {"role": "tool", "content": "", "tool_call_id": "c1"},
            {"role": "user", "content": "fine", "timestamp": "2026-01-02T03:04:05+01:00"},
        ]
    )
    assert [m.role for m in ok] == ["assistant", "tool", "user"] and ok[1].metadata["tool_call_id"] == "c1"
