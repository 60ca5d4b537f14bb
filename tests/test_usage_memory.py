"""The memory client's summariser, the extractor and the embedder write to the usage ledger of the memory's
own database (real SQLite files and PostgreSQL); the extractive summariser, which calls no model, writes
nothing, and a read records nothing unless asked to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from remem import LLMSummarizer, Memory, ScriptedChatModel, Settings
from remem.errors import ArgumentTypeError, RememUsageError
from remem.extraction import MemoryExtractor
from remem.messages import approximate_token_count
from remem.store import SqliteStore
from remem.testing import FakeEmbedder
from remem.usage import Meter, open_ledger

SETTINGS = Settings(embedder="fake")
TURNS = [
    {"role": "user", "content": "I'm Maya. We are migrating our billing workflow."},
    {"role": "assistant", "content": "Which step fails?"},
    {"role": "user", "content": "The invoice export step times out."},
]


def test_the_memory_clients_summaries_are_recorded_for_the_thread_and_user(db_url: str) -> None:
    model = ScriptedChatModel(default="Maya is migrating billing; the invoice export times out.")
    with Memory.from_url(db_url, settings=SETTINGS, summarizer=LLMSummarizer(model)) as memory:
        thread = memory.thread("t1", user_id="maya")
        thread.add_messages(TURNS)
        thread.get_summary()
        thread.get_summary()  # up to date: no model call, no row
    with open_ledger(db_url) as ledger:
        rows = ledger.events()
    assert len(model.calls) == 1
    assert [(r.kind, r.thread_id, r.user_id, r.node, r.model) for r in rows] == [
        ("summariser", "t1", "maya", "memory.summary", "scripted")
    ]
    assert rows[0].input_tokens == approximate_token_count(model.calls[0])  # what the model reported


def test_a_summary_rows_source_says_whether_the_provider_reported_its_numbers(db_url: str) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from remem import build_agent, checkpointer_from_url, run_turn

    summary = "Maya is migrating billing; the invoice export times out."
    silent = GenericFakeChatModel(messages=iter([AIMessage(content=summary)] * 3))  # reports no usage
    reporting = ScriptedChatModel(default=summary)
    with Memory.from_url(db_url, settings=SETTINGS, summarizer=LLMSummarizer(silent)) as memory:
        memory.thread("t1", user_id="maya").add_messages(TURNS)
        memory.thread("t1", user_id="maya").get_summary()
    with Memory.from_url(db_url, settings=SETTINGS, summarizer=LLMSummarizer(reporting)) as memory:
        memory.thread("t2", user_id="maya").add_messages(TURNS)
        memory.thread("t2", user_id="maya").get_summary()
    # The agent's own summary step too: its chat model reports usage, its summariser does not.
    with checkpointer_from_url(db_url) as saver:
        agent = build_agent(
            ScriptedChatModel(default="ok"),
            strategy="summary",
            checkpointer=saver,
            summarizer=LLMSummarizer(silent),
            settings=Settings(summary_trigger_messages=4, keep_messages=2),
        )
        for text in ("one", "two", "three"):
            run_turn(agent, "t3", text, user_id="maya")
    with open_ledger(db_url) as ledger:
        sources = {(r.thread_id, r.kind, r.source) for r in ledger.events()}
    assert ("t1", "summariser", "counted") in sources
    assert ("t2", "summariser", "provider") in sources
    assert ("t3", "summariser", "counted") in sources and ("t3", "chat", "provider") in sources
    assert ("t1", "summariser", "provider") not in sources and ("t3", "summariser", "provider") not in sources


def test_the_extractive_summariser_and_reads_record_nothing(db_url: str) -> None:
    with Memory.from_url(db_url, settings=SETTINGS) as memory:  # no model configured: extractive
        thread = memory.thread("t1", user_id="maya")
        thread.add_messages(TURNS)
        thread.get_summary()
        memory.search("billing", user_id="maya", thread_id="t1")
    with open_ledger(db_url) as ledger:
        assert ledger.events() == []


def test_embedder_batches_are_recorded_when_asked(db_url: str) -> None:
    with Memory.from_url(db_url, settings=SETTINGS, meter_embeddings=True) as memory:
        memory.thread("t1", user_id="maya").add_messages(TURNS)
        memory.search("billing", user_id="maya")
    with open_ledger(db_url) as ledger:
        rows = ledger.events(kind="embedder")
    assert rows and all(r.model == "fake" and r.source == "counted" and r.output_tokens == 0 for r in rows)
    assert sum(r.input_tokens for r in rows) >= sum(len(t["content"]) // 4 for t in TURNS)


def test_the_extractors_model_calls_are_recorded(tmp_path: Path) -> None:
    reply = json.dumps(
        {
            "memories": [
                {
                    "kind": "fact",
                    "text": "Maya migrates billing.",
                    "confidence": 0.9,
                    "source_message_ids": ["h1"],
                }
            ]
        }
    )
    model = ScriptedChatModel(replies=[reply])
    index = {"dims": 32, "embed": FakeEmbedder(32), "fields": ["content"]}
    with (
        SqliteStore.from_conn_string(tmp_path / "x.db", index=index) as store,
        open_ledger(f"sqlite:///{tmp_path / 'x.db'}") as ledger,
    ):
        extractor = MemoryExtractor(store, model=model, meter=Meter(ledger))
        messages = [
            HumanMessage("I'm Maya, migrating our billing.", id="h1"),
            AIMessage("Which step fails?", id="a1"),
        ]
        result = extractor.run(messages, user_id="maya", thread_id="t1")
        assert result.llm_used and len(result.added) == 1
        rows = ledger.events()
    assert [(r.kind, r.node, r.thread_id, r.user_id, r.source) for r in rows] == [
        ("extractor", "extract", "t1", "maya", "provider")
    ]
    assert rows[0].input_tokens == approximate_token_count(model.calls[0])


_TYPE, _VALUE = ArgumentTypeError, RememUsageError
# Meter.record(kind, model, **fields) that would have written a wrong row (a kind no report groups by,
# tokens that lower every total) or failed inside the ledger's driver.
_WRONG_RECORDS: dict[str, tuple[tuple[object, object], dict[str, object], type[Exception], str]] = {
    "unknown kind": (("reranker", "m"), {}, _VALUE, "use one of chat, summariser, extractor, embedder"),
    "kind None": ((None, "m"), {}, _VALUE, "usage kind None is unknown"),
    "unknown source": (("chat", "m"), {"source": "guessed"}, _VALUE, "use one of provider, counted"),
    "model not a text": (("chat", 4), {}, _TYPE, "model's name"),
    "negative input": (
        ("chat", "m"),
        {"input_tokens": -1},
        _VALUE,
        "input_tokens must be 0 or more",
    ),
    "negative output": (("chat", "m"), {"output_tokens": -5}, _VALUE, "output_tokens must be 0 or more"),
    "negative cached": (("chat", "m"), {"cached_tokens": -1}, _VALUE, "cached_tokens must be 0 or more"),
    "tokens as text": (("chat", "m"), {"input_tokens": "12"}, _TYPE, r"a whole number such as input_tokens="),
    "tokens as float": (("chat", "m"), {"output_tokens": 1.5}, _TYPE, "a whole number"),
    "tokens as bool": (("chat", "m"), {"input_tokens": True}, _TYPE, "a whole number"),
    "turn as text": (("chat", "m"), {"turn": "3"}, _TYPE, r"turn is a whole number such as turn=3"),
    "negative turn": (("chat", "m"), {"turn": -1}, _VALUE, "turn must be 0 or more"),
    "thread id not a text": (("chat", "m"), {"thread_id": 3}, _TYPE, r"thread_id is a text \(str\) or None"),
    "user id not a text": (("chat", "m"), {"user_id": ["maya"]}, _TYPE, "user_id is a text"),
    "latency as text": (("chat", "m"), {"latency_ms": "5"}, _TYPE, "latency_ms is a number"),
    "negative latency": (("chat", "m"), {"latency_ms": -2.0}, _VALUE, "latency_ms must be 0 or more"),
}


@pytest.mark.parametrize("case", sorted(_WRONG_RECORDS))
def test_the_meter_refuses_an_unknown_kind_and_wrong_token_counts(tmp_path: Path, case: str) -> None:
    args, changed, error, words = _WRONG_RECORDS[case]
    fields: dict[str, object] = {"input_tokens": 10, "output_tokens": 2, **changed}
    with open_ledger(f"sqlite:///{tmp_path / 'x.db'}") as ledger:
        meter = Meter(ledger)
        with pytest.raises(error, match=words) as raised:
            meter.record(*args, **fields)  # type: ignore[arg-type]
        assert isinstance(raised.value, RememUsageError)
        with pytest.raises(error, match=words):  # the unrecorded event is checked the same way
            meter.event(*args, **fields)  # type: ignore[arg-type]
        assert ledger.events() == []
        meter.record("chat", "m", input_tokens=0, output_tokens=0, turn=0, latency_ms=0)  # zero is a count
        assert [(e.kind, e.input_tokens, e.turn) for e in ledger.events()] == [("chat", 0, 0)]


def test_the_meter_counts_a_batch_of_texts_not_a_texts_characters(tmp_path: Path) -> None:
    with open_ledger(f"sqlite:///{tmp_path / 'x.db'}") as ledger:
        meter = Meter(ledger)
        with pytest.raises(ArgumentTypeError, match=r"a list of the texts embedded"):
            meter.record_texts("embedder", "e5", "green tea")  # type: ignore[arg-type]
        assert ledger.events() == []
        event = meter.record_texts("embedder", "e5", ["green tea"])
        assert (event.input_tokens, [e.kind for e in ledger.events()]) == (3, ["embedder"])
