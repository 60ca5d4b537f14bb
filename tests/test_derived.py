"""Derived text is never taken for the user's: every message remem derives from memory (summaries, cards,
recalls, remem's own prompts) is marked once (``remem.messages.mark_derived``), and neither the persist
path (the middleware's ``persistable``, ``Thread.add_messages``) nor the extract path (``is_extractable``,
``MemoryExtractor``) takes it as a turn. Properties over every kind of derived message remem builds."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.memory import InMemoryStore

from remem import Memory
from remem.extraction import Candidate, MemoryExtractor, is_extractable
from remem.extraction._schema import extraction_prompt, update_prompt
from remem.layout import thread_messages
from remem.memory import ContextCard, Recall, is_card_message
from remem.messages import DERIVED_KEY, DERIVED_SOURCES, derived_source, is_derived, mark_derived
from remem.middleware._compaction import Compactor, persistable
from remem.strategies import Plan, build_view, summary_message
from remem.summarize import build_summary_prompt
from remem.testing import ScriptedChatModel, offline_settings
from tests.histories import histories

SETTINGS = offline_settings()
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200).filter(str.strip)


def _builders(text: str) -> dict[str, Callable[[], list[BaseMessage]]]:
    """Every builder of a message remem sends a model, by what it builds, for one text."""
    turn = HumanMessage(content=text, id="turn")
    return {
        "summary message": lambda: [summary_message(text)],
        "summary in a view": lambda: build_view(Plan(system=[], kept=[turn]), text)[:1],
        "context card": lambda: [ContextCard(content=text).to_message()],
        "compactor card": lambda: [Compactor.card_message(ContextCard(content=text))],
        "placeholder card": lambda: [Compactor.card_message(ContextCard(content=""))],
        "recall": lambda: [Recall(content=text).to_message()],
        "extraction prompt": lambda: extraction_prompt([("turn", "user", text)]),
        "update prompt": lambda: update_prompt(
            [(Candidate(kind="fact", text=text[:2000]), [("m", "fact", text)])]
        ),
        "summariser prompt": lambda: build_summary_prompt(text, [turn]),
        "0.1 card": lambda: [HumanMessage(content=text, name="memory_context_card")],
        "0.1 recall": lambda: [HumanMessage(content=text, name="memory_recall")],
        "0.1 marker": lambda: [AIMessage(content=text, additional_kwargs={"remem_derived": True})],
        "marked by hand": lambda: [mark_derived(AIMessage(content=text, id="x"), source="memory")],
    }


KINDS = sorted(_builders("x"))


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory.from_url("memory://", settings=SETTINGS) as mem:
        yield mem


def _roundtrip(message: BaseMessage) -> BaseMessage:
    # What a checkpointer gives back: a derived message in a saved state stays derived.
    serde = JsonPlusSerializer()
    restored: BaseMessage = serde.loads_typed(serde.dumps_typed(message))
    return restored


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT, kind=st.sampled_from(KINDS), saved=st.booleans())
def test_no_derived_message_is_persisted_or_extracted(
    memory: Memory, text: str, kind: str, saved: bool
) -> None:
    built = _builders(text)[kind]()
    derived = [m for m in built if not isinstance(m, SystemMessage)]  # a system prompt is never a turn anyway
    assert derived, kind
    if saved:
        derived = [_roundtrip(m) for m in derived]
    thread = memory.thread(f"t-{uuid.uuid4().hex}", user_id="u")  # the memory outlives one example
    for message in derived:
        assert is_derived(message) and derived_source(message) in DERIVED_SOURCES, (kind, message)
        if not kind.startswith(
            "0.1"
        ):  # remem's builders mark explicitly, not by a name that happens to match
            assert message.additional_kwargs[DERIVED_KEY] in DERIVED_SOURCES, kind
        # The persist path.
        assert persistable(message) is None
        assert thread.add_messages([message]) == []
        # The extract path.
        assert not is_extractable(message)
    store = InMemoryStore()
    result = MemoryExtractor(store, model=ScriptedChatModel(replies=[])).run(
        derived, user_id="u", thread_id="t"
    )
    assert (result.indexed_turns, result.skipped_messages, result.llm_used) == (0, len(derived), False)
    assert thread.messages() == [] and store.search(thread_messages("t")) == []
    # The same text as the user's own turn is taken: the paths refuse derived text, not all text.
    own = HumanMessage(content=text, id="own")
    assert persistable(own) is not None and is_extractable(own)
    assert [m.id for m in thread.add_messages([own])] == ["own"]


@settings(max_examples=60, deadline=None)
@given(history=histories(min_turns=1, max_turns=5), text=TEXT, data=st.data())
def test_derived_messages_mixed_into_a_history_change_nothing_that_is_stored(
    history: list[BaseMessage], text: str, data: st.DataObject
) -> None:
    builders = _builders(text)
    mixed = list(history)
    for kind in data.draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4)):
        derived = [m for m in builders[kind]() if not isinstance(m, SystemMessage)]
        at = data.draw(st.integers(0, len(mixed)))
        mixed[at:at] = derived

    def persisted(messages: list[BaseMessage]) -> list[dict[str, str]]:
        return [turn for m in messages if (turn := persistable(m)) is not None]

    assert persisted(mixed) == persisted(history)
    assert persisted(history), "a history with a user turn persists something"
    extracted = [m.id for m in mixed if is_extractable(m)]
    assert extracted == [m.id for m in history if is_extractable(m)] and extracted


def test_mark_derived_copies_and_names_its_source() -> None:
    original = HumanMessage(content="hi", id="h", additional_kwargs={"keep": 1})
    marked = mark_derived(original, source="recall")
    assert not is_derived(original) and original.additional_kwargs == {"keep": 1}
    assert derived_source(marked) == "recall" and marked.additional_kwargs["keep"] == 1
    assert (marked.id, marked.content) == ("h", "hi")
    with pytest.raises(ValueError, match="source must be one of"):
        mark_derived(original, source="user")  # type: ignore[arg-type]
    assert not is_derived("not a message") and derived_source(None) is None


def test_cards_and_recalls_from_a_real_thread_are_derived(memory: Memory) -> None:
    thread = memory.thread("real", user_id="u")
    thread.add_messages(
        [{"role": "user", "content": f"I like hiking in the Alps, part {i}", "id": f"m{i}"} for i in range(6)]
    )
    card = thread.get_context_card(except_last_messages=2, max_recent_messages=0, query="hiking")
    recall = thread.recall("hiking", 3)
    assert card.content and recall.content  # the builders had something to say
    card_message, recall_message = card.to_message(), recall.to_message()
    assert is_card_message(card_message) and not is_card_message(recall_message)
    for message in (card_message, recall_message):
        assert is_derived(message) and persistable(message) is None and not is_extractable(message)
    assert len(thread.add_messages([card_message, recall_message])) == 0
    assert len(thread.messages()) == 6
