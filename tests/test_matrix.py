"""One contract over every cell of the backend matrix (``tests/matrix.py``): stores, savers and the memory
client, sync and async, on a SQLite file, SQLite ``:memory:``, the machine's Postgres and pgvector.

Each cell runs its component's contract and checks the values that come back, not only that nothing
failed. Only the embedder is a fake (deterministic); every database is real."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests import matrix
from tests.matrix import Cell


def test_the_matrix_names_every_cell_once() -> None:
    ids = [param.id for param in matrix.cells()]
    assert len(ids) == len(set(ids)) == len(matrix.COMPONENTS) * len(matrix.FLAVOURS) * len(matrix.BACKENDS)
    every = {tuple(param.values[0]) for param in matrix.cells()}
    assert set(matrix.MISSING) <= every, "a missing cell must be a cell of the matrix"


def test_contract(matrix_cell: Cell) -> None:
    CONTRACTS[matrix_cell.component](matrix_cell)


MAYA = ("users", "maya", "notes")
LEE = ("users", "lee", "notes")


def _store_contract(cell: Cell) -> None:
    store = cell.obj
    tea = {"text": "Maya prefers green tea in the morning", "kind": "preference"}
    cell.call(store, "put", MAYA, "tea", tea)
    cell.call(store, "put", MAYA, "cat", {"text": "Her cat is called Miso", "kind": "fact"})
    cell.call(
        store, "put", MAYA, "deploy", {"text": "She deploys with Kubernetes on Fridays", "kind": "fact"}
    )
    cell.call(store, "put", LEE, "tea", {"text": "Lee drinks green tea too", "kind": "preference"})

    got = cell.call(store, "get", MAYA, "tea")
    assert (got.namespace, got.key, got.value) == (MAYA, "tea", tea)
    assert cell.call(store, "get", MAYA, "absent") is None

    hits = cell.call(store, "search", ("users", "maya"), query="green tea", limit=3)
    assert hits and hits[0].key == "tea" and hits[0].value == tea
    assert {hit.namespace for hit in hits} == {MAYA}, "the prefix keeps Lee's items out"
    facts = cell.call(store, "search", MAYA, filter={"kind": "fact"}, limit=10)
    assert sorted(hit.key for hit in facts) == ["cat", "deploy"]
    assert cell.call(store, "list_namespaces", prefix=("users",)) == [LEE, MAYA]

    matcha = {"text": "Maya switched to matcha", "kind": "preference"}
    cell.call(store, "put", MAYA, "tea", matcha)
    assert cell.call(store, "get", MAYA, "tea").value == matcha
    assert cell.call(store, "search", MAYA, query="matcha", limit=1)[0].key == "tea"

    cell.call(store, "delete", MAYA, "tea")
    assert cell.call(store, "get", MAYA, "tea") is None
    left = cell.call(store, "search", ("users",), query="matcha green tea", limit=10)
    assert sorted((hit.namespace, hit.key) for hit in left) == [(LEE, "tea"), (MAYA, "cat"), (MAYA, "deploy")]
    assert cell.call(store, "get", LEE, "tea").value["text"] == "Lee drinks green tea too"


def _checkpoint(messages: list[Any], version: str) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": messages, "step": len(messages)}
    checkpoint["channel_versions"] = {"messages": version, "step": version}
    return checkpoint


def _saver_contract(cell: Cell) -> None:
    saver = cell.obj
    v1 = saver.get_next_version(None, None)
    v2 = saver.get_next_version(v1, None)
    hi = HumanMessage("hi, I am Maya", id="h1")
    hello = AIMessage("hello Maya", id="a1")
    thread = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}

    first = _checkpoint([hi], v1)
    saved1 = cell.call(
        saver, "put", thread, first, {"source": "input", "step": -1}, {"messages": v1, "step": v1}
    )
    assert saved1["configurable"]["checkpoint_id"] == first["id"]
    tup = cell.call(saver, "get_tuple", saved1)
    assert tup.checkpoint["id"] == first["id"]
    assert tup.checkpoint["channel_values"] == {"messages": [hi], "step": 1}
    assert tup.metadata["source"] == "input" and tup.metadata["step"] == -1
    assert tup.parent_config is None and tup.pending_writes == []

    second = _checkpoint([hi, hello], v2)
    saved2 = cell.call(
        saver, "put", saved1, second, {"source": "loop", "step": 0}, {"messages": v2, "step": v2}
    )
    cell.call(saver, "put_writes", saved2, [("messages", AIMessage("pending", id="a2"))], "task-1")

    latest = cell.call(saver, "get_tuple", {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert latest.checkpoint["id"] == second["id"]
    assert latest.checkpoint["channel_values"] == {"messages": [hi, hello], "step": 2}
    assert latest.parent_config["configurable"]["checkpoint_id"] == first["id"]
    assert latest.pending_writes == [("task-1", "messages", AIMessage("pending", id="a2"))]
    listed = cell.call(saver, "list", {"configurable": {"thread_id": "t1"}})
    assert [t.checkpoint["id"] for t in listed] == [second["id"], first["id"]]
    assert [t.metadata["step"] for t in listed] == [0, -1]
    inputs = cell.call(saver, "list", {"configurable": {"thread_id": "t1"}}, filter={"source": "input"})
    assert [t.checkpoint["id"] for t in inputs] == [first["id"]]

    other = _checkpoint([HumanMessage("another thread", id="h9")], v1)
    cell.call(
        saver, "put", {"configurable": {"thread_id": "t2", "checkpoint_ns": ""}}, other, {}, {"messages": v1}
    )
    cell.call(saver, "delete_thread", "t1")
    assert cell.call(saver, "get_tuple", {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}) is None
    assert cell.call(saver, "list", {"configurable": {"thread_id": "t1"}}) == []
    kept = cell.call(saver, "get_tuple", {"configurable": {"thread_id": "t2", "checkpoint_ns": ""}})
    assert kept.checkpoint["id"] == other["id"]


CONVERSATION = [
    {"role": "user", "content": "My cat is called Miso", "id": "u1"},
    {"role": "assistant", "content": "Miso is a lovely name for a cat", "id": "a1"},
    {"role": "user", "content": "I deploy with Kubernetes on Fridays", "id": "u2"},
    {"role": "assistant", "content": "Fridays are brave", "id": "a2"},
]


def _memory_contract(cell: Cell) -> None:
    memory = cell.obj
    thread = cell.call(memory, "thread", "t1", user_id="maya")
    assert thread.user_id == "maya"
    added = cell.call(thread, "add_messages", CONVERSATION)
    assert [m.id for m in added] == ["u1", "a1", "u2", "a2"]
    assert cell.call(thread, "add_messages", CONVERSATION[:2]) == added[:2], "a retry stores nothing twice"

    history = cell.call(thread, "messages")
    assert [(m.id, m.role, m.content) for m in history] == [
        (m["id"], m["role"], m["content"]) for m in CONVERSATION
    ]
    assert [m.id for m in cell.call(thread, "messages", last=1)] == ["a2"]
    assert cell.call(thread, "info").message_count == 4

    found = cell.call(memory, "search", "cat Miso", thread_id="t1", k=2)
    assert found and found[0].id in {"u1", "a1"} and {r.type for r in found} == {"message"}
    assert "Miso" in found[0].content

    card = cell.call(thread, "get_context_card", except_last_messages=1, query="what is my cat called?")
    assert "Miso" in card.content, card.content
    assert "Fridays are brave" not in card.content, "the excluded tail is never in the card"
    reopened = cell.call(memory, "get_thread", "t1")
    assert reopened.user_id == "maya"


CONTRACTS = {"store": _store_contract, "saver": _saver_contract, "memory": _memory_contract}
