"""Extraction: raw turns without an LLM; typed memories, provenance and the update step with a scripted model."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from remem.errors import StorageError
from remem.extraction import (
    ExtractionError,
    MemoryExtractor,
    create_memory_tools,
    extraction_node,
    is_extractable,
)
from remem.layout import thread_messages, user_memories
from remem.messages import mark_derived
from remem.store import SqliteStore, hybrid_search
from remem.strategies import summary_message
from remem.testing import FakeEmbedder, ScriptedChatModel


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    index = {"dims": 32, "embed": FakeEmbedder(32), "fields": ["content"]}
    with SqliteStore.from_conn_string(tmp_path / "x.db", index=index) as s:
        yield s


def _conversation() -> list[BaseMessage]:
    return [
        SystemMessage(content="You are a helpful assistant. SYSTEMSECRET", id="s0"),
        HumanMessage(content="Hi! I live in Lisbon and I prefer green tea.", id="h1"),
        AIMessage(content="Nice to meet you. Lisbon is lovely.", id="a1"),
        HumanMessage(content="Earlier: the user owns a boat CARDTEXT", name="memory_context_card", id="c1"),
        HumanMessage(content="recalled: user likes RECALLTEXT", name="memory_recall", id="r1"),
        HumanMessage(content="DERIVEDTEXT", id="d1", additional_kwargs={"remem_derived": True}),  # 0.1 mark
        mark_derived(HumanMessage(content="MARKEDTEXT", id="d2"), source="memory"),
        summary_message("SUMMARYTEXT"),
        ToolMessage(content="TOOLTEXT", tool_call_id="x", id="t1"),
        HumanMessage(content="Please always answer in French.", id="h2"),
    ]


DERIVED_TEXTS = (
    "SYSTEMSECRET",
    "CARDTEXT",
    "RECALLTEXT",
    "DERIVEDTEXT",
    "MARKEDTEXT",
    "SUMMARYTEXT",
    "TOOLTEXT",
)


def _extraction(*memories: dict[str, Any]) -> str:
    return json.dumps({"memories": list(memories)})


def test_without_llm_raw_turns_are_searchable_and_derived_text_is_skipped(store: SqliteStore) -> None:
    extractor = MemoryExtractor(store)
    result = extractor.run(_conversation(), user_id="u1", thread_id="t1")
    assert (result.new_messages, result.indexed_turns, result.skipped_messages) == (10, 3, 7)
    assert not result.llm_used and result.watermark == "h2"
    keys = {i.key for i in store.search(thread_messages("t1"), limit=50)}
    assert keys == {"h1", "a1", "h2"}
    assert (
        hybrid_search(store, ("threads",), "green tea", mode="keyword", filter={"user_id": "u1"})[0].key
        == "h1"
    )
    for derived in DERIVED_TEXTS:
        assert hybrid_search(store, (), derived, mode="keyword") == []
    again = extractor.run(_conversation(), user_id="u1", thread_id="t1")
    assert again.new_messages == 0 and again.indexed_turns == 0
    store.put(thread_messages("t1"), "h3", {"content": "kept as the memory client wrote it", "seq": 7})
    more = extractor.run(
        [*_conversation(), HumanMessage(content="My dog is Rex.", id="h3")], user_id="u1", thread_id="t1"
    )
    assert more.new_messages == 1 and more.indexed_turns == 0  # already stored: left as it is
    item = store.get(thread_messages("t1"), "h3")
    assert item is not None and item.value == {"content": "kept as the memory client wrote it", "seq": 7}


def test_llm_extracts_typed_memories_with_provenance(store: SqliteStore) -> None:
    model = ScriptedChatModel(
        replies=[
            _extraction(
                {
                    "kind": "fact",
                    "text": "The user lives in Lisbon.",
                    "confidence": 0.9,
                    "source_message_ids": ["h1"],
                },
                {
                    "kind": "preference",
                    "text": "The user prefers green tea.",
                    "confidence": 1.7,
                    "source_message_ids": ["zz"],
                },
                {
                    "kind": "instruction",
                    "text": "Answer in French.",
                    "confidence": 0.8,
                    "source_message_ids": ["h2"],
                },
            )
        ]
    )
    result = MemoryExtractor(store, model).run(_conversation(), user_id="u1", thread_id="t1")
    assert result.llm_used and len(result.added) == 3
    assert len(model.calls) == 1  # nothing similar stored yet: no update call
    prompt = "\n".join(str(m.content) for m in model.calls[0])
    assert "green tea" in prompt and 'id="h2"' in prompt
    for derived in DERIVED_TEXTS:
        assert derived not in prompt  # never extracted from system prompts, cards, recalls, tool results
    stored = {i.value["kind"]: i.value for i in store.search(user_memories("u1"), limit=10)}
    assert set(stored) == {"fact", "preference", "instruction"}
    fact = stored["fact"]
    assert fact["source_message_ids"] == ["h1"] and fact["thread_id"] == "t1" and fact["user_id"] == "u1"
    assert fact["confidence"] == 0.9 and fact["valid"] is True and fact["extracted_at"]
    assert stored["preference"]["confidence"] == 1.0  # clamped
    assert stored["preference"]["source_message_ids"] == ["h1", "h2"]  # unknown ids: the user's turns


def _target_reply(action: str, text: str | None = None) -> Any:
    def reply(messages: list[BaseMessage]) -> str:
        target = re.search(r'memory id="([^"]+)"', str(messages[-1].content))
        assert target is not None
        return json.dumps(
            {"decisions": [{"candidate": 0, "action": action, "target_id": target.group(1), "text": text}]}
        )

    return reply


def _seed_lisbon(store: SqliteStore) -> str:
    model = ScriptedChatModel(
        replies=[_extraction({"kind": "fact", "text": "The user lives in Lisbon.", "confidence": 0.9})]
    )
    return (
        MemoryExtractor(store, model)
        .run([HumanMessage(content="I live in Lisbon.", id="m1")], user_id="u1", thread_id="t1")
        .added[0]
    )


def test_update_supersedes_and_links_without_overwriting(store: SqliteStore) -> None:
    old_id = _seed_lisbon(store)
    model = ScriptedChatModel(
        replies=[
            _extraction({"kind": "fact", "text": "The user lives in Porto.", "source_message_ids": ["m2"]}),
            _target_reply("update", "The user moved from Lisbon to Porto."),
        ]
    )
    result = MemoryExtractor(store, model).run(
        [HumanMessage(content="I moved to Porto last month.", id="m2")], user_id="u1", thread_id="t2"
    )
    assert len(model.calls) == 2 and "The user lives in Lisbon." in str(model.calls[1][-1].content)
    [(old, new)] = result.updated
    assert old == old_id
    old_item, new_item = store.get(user_memories("u1"), old), store.get(user_memories("u1"), new)
    assert old_item is not None and new_item is not None
    assert old_item.value["content"] == "The user lives in Lisbon."  # kept, not overwritten
    assert old_item.value["valid"] is False and old_item.value["superseded_by"] == new
    assert old_item.value["invalid_reason"] == "superseded" and old_item.value["status"] == "superseded"
    assert (
        new_item.value["supersedes"] == [old]
        and new_item.value["content"] == "The user moved from Lisbon to Porto."
    )
    valid = hybrid_search(store, ("users", "u1"), "where does the user live", filter={"valid": True})
    assert [h.key for h in valid] == [new]


def test_delete_noop_and_invented_targets(store: SqliteStore) -> None:
    old_id = _seed_lisbon(store)
    model = ScriptedChatModel(
        replies=[
            _extraction({"kind": "fact", "text": "The user no longer lives in Lisbon."}),
            _target_reply("delete"),
            _extraction({"kind": "fact", "text": "The user lives in Lisbon."}),  # a repeat of what was known
            json.dumps({"decisions": [{"candidate": 0, "action": "noop"}]}),
            _extraction({"kind": "event", "text": "The user visits Lisbon in May."}),
            json.dumps({"decisions": [{"candidate": 0, "action": "update", "target_id": "mem-invented"}]}),
        ]
    )
    extractor = MemoryExtractor(store, model)
    store.put(
        user_memories("u1"), "other", {"content": "Lisbon trams are yellow", "kind": "fact", "valid": True}
    )
    result = extractor.run([HumanMessage(content="I left Lisbon.", id="x1")], user_id="u1", thread_id="t3")
    assert result.deleted == [old_id] or result.deleted == ["other"]
    gone = store.get(user_memories("u1"), result.deleted[0])
    assert (
        gone is not None and gone.value["valid"] is False and gone.value["invalid_reason"] == "contradicted"
    )
    noop = extractor.run([HumanMessage(content="Lisbon is home.", id="x2")], user_id="u1", thread_id="t4")
    assert noop.unchanged == 1 and not noop.added
    invented = extractor.run([HumanMessage(content="May trip!", id="x3")], user_id="u1", thread_id="t5")
    assert len(invented.added) == 1 and not invented.updated  # an unknown target is never touched


def test_failed_extraction_keeps_the_watermark_and_is_retried(store: SqliteStore) -> None:
    messages = [
        HumanMessage(content="I live in Lisbon.", id="m1"),
        HumanMessage(content="I like jazz.", id="m2"),
    ]
    failing = ScriptedChatModel(replies=[RuntimeError("endpoint down")])
    extractor = MemoryExtractor(store, failing)
    with pytest.raises(ExtractionError, match="retries"):
        extractor.run(messages, user_id="u1", thread_id="t1")
    state = extractor.watermark("t1")
    assert state is not None and state["watermark"] is None and state["attempts"] == 1
    assert "endpoint down" in state["last_error"]
    assert {i.key for i in store.search(thread_messages("t1"))} == {"m1", "m2"}  # recall still works

    extractor.model = ScriptedChatModel(replies=["this is not json"])
    with pytest.raises(ExtractionError):
        extractor.run(messages, user_id="u1", thread_id="t1")
    assert extractor.watermark("t1")["attempts"] == 2  # type: ignore[index]

    working = ScriptedChatModel(replies=[_extraction({"kind": "preference", "text": "The user likes jazz."})])
    extractor.model = working
    result = extractor.run([*messages, AIMessage(content="Noted.", id="a3")], user_id="u1", thread_id="t1")
    assert 'id="m1"' in str(working.calls[0][-1].content)  # the failed messages are read again
    assert result.added and extractor.watermark("t1") == {
        **extractor.watermark("t1"),
        "watermark": "a3",
        "attempts": 0,
    }  # type: ignore[dict-item]


def test_switch_turns_extraction_off(store: SqliteStore) -> None:
    model = ScriptedChatModel(replies=[])
    result = MemoryExtractor(store, model, enabled=False).run(_conversation(), user_id="u1", thread_id="t1")
    assert not result.llm_used and model.calls == [] and result.indexed_turns == 3


def test_is_extractable() -> None:
    assert is_extractable(HumanMessage(content="hello"))
    assert is_extractable(AIMessage(content=[{"type": "text", "text": "a reply"}]))
    assert not is_extractable(AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": "1"}]))
    assert not is_extractable(SystemMessage(content="rules"))


def test_memory_tools(store: SqliteStore) -> None:
    remember, recall, forget = create_memory_tools(store)
    config = {"configurable": {"user_id": "u7", "thread_id": "t7"}}
    saved = json.loads(remember.invoke({"text": "The user is allergic to peanuts.", "kind": "fact"}, config))
    store.put(
        thread_messages("t7"), "h1", {"content": "peanuts make me sick", "user_id": "u7", "thread_id": "t7"}
    )
    store.put(thread_messages("t8"), "h1", {"content": "peanuts are great", "user_id": "someone-else"})
    # A thread's metadata mentions the user too, but it is not a turn to recall.
    store.put(("threads", "t7", "meta"), "thread", {"content": "peanuts thread", "user_id": "u7"})
    records = json.loads(recall.invoke({"query": "peanuts"}, config))["records"]
    assert {r["id"] for r in records} == {saved["saved"], "h1"}
    assert all(r["source"] != "thread None" for r in records)
    assert json.loads(forget.invoke({"memory_id": saved["saved"]}, config)) == {"deleted": saved["saved"]}
    assert store.get(user_memories("u7"), saved["saved"]) is None
    assert json.loads(forget.invoke({"memory_id": "nope"}, config))["deleted"] is None
    assert "kind must be" in remember.invoke({"text": "x", "kind": "rumour"}, config)


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@pytest.mark.parametrize("background", [False, True])
def test_extraction_node_in_a_graph_uses_runtime_store(store: SqliteStore, background: bool) -> None:
    model = ScriptedChatModel(replies=[_extraction({"kind": "fact", "text": "The user sails."})])
    node = extraction_node(MemoryExtractor(model=model), background=background)

    def reply(state: _State) -> dict[str, Any]:
        return {"messages": [AIMessage(content="Sounds fun!", id="a-1")]}

    builder = StateGraph(_State)
    builder.add_node("reply", reply)
    builder.add_node("extract", node)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "extract")
    graph = builder.compile(store=store)
    config = {"configurable": {"thread_id": "g1", "user_id": "u5"}}
    graph.invoke({"messages": [HumanMessage(content="I sail on weekends.", id="h-1")]}, config)
    if background:
        assert [type(r).__name__ for r in node.wait()] == ["ExtractionResult"]  # type: ignore[attr-defined]
    assert [i.value["content"] for i in store.search(user_memories("u5"))] == ["The user sails."]
    assert {i.key for i in store.search(thread_messages("g1"))} == {"h-1", "a-1"}


def test_a_write_failure_part_way_leaves_no_memory_and_the_retry_adds_each_once(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = _extraction(
        {"kind": "fact", "text": "The user lives in Lisbon."},
        {"kind": "preference", "text": "The user likes jazz."},
    )
    messages = [HumanMessage(content="I live in Lisbon and I like jazz.", id="m1")]
    real_batch = store.batch
    memory_writes = []

    def failing_batch(ops: Any) -> Any:
        ops = list(ops)
        if any(getattr(op, "namespace", ())[:1] == ("users",) and getattr(op, "value", None) for op in ops):
            memory_writes.append(ops)
            if len(memory_writes) == 2 or sum(getattr(op, "value", None) is not None for op in ops) > 1:
                raise StorageError("disk full")  # the second memory write fails, however they are grouped
        return real_batch(ops)

    monkeypatch.setattr(store, "batch", failing_batch)
    extractor = MemoryExtractor(store, ScriptedChatModel(replies=[two]))
    with pytest.raises(ExtractionError):
        extractor.run(messages, user_id="u1", thread_id="t1")
    monkeypatch.setattr(store, "batch", real_batch)
    assert store.search(user_memories("u1")) == []  # nothing half-written

    extractor.model = ScriptedChatModel(replies=[two])
    extractor.run(messages, user_id="u1", thread_id="t1")
    texts = sorted(i.value["content"] for i in store.search(user_memories("u1")))
    assert texts == ["The user likes jazz.", "The user lives in Lisbon."]
