"""A put serializes only the messages that are new or changed since the thread's last read or write
(``EncodeMemo``): a turn's puts hand the saver the same message objects again, and serializing them all
on every put was work that grew with the thread. Counted with a counting serializer, never timed; a
message changed in place, at any depth, is serialized again and stored as changed."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.graph import START, MessagesState, StateGraph

from remem.checkpoint import SqliteSaver
from remem.checkpoint._serde import RememSerializer

THREAD = {"configurable": {"thread_id": "memo"}}


class Counting(RememSerializer):
    """Counts the messages it serializes."""

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.messages += isinstance(obj, BaseMessage)
        return super().dumps_typed(obj)


def _saver(serde: SerializerProtocol) -> SqliteSaver:
    saver = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False), serde=serde)
    saver.setup()
    return saver


def _graph(saver: SqliteSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def _turns(graph: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        graph.invoke({"messages": [HumanMessage(f"message {i}")]}, THREAD)


def _serialized_by_one_turn(history: int) -> int:
    serde = Counting()
    graph = _graph(_saver(serde))
    _turns(graph, history)
    serde.messages = 0
    _turns(graph, 1, history)
    return serde.messages


def test_a_turn_serializes_the_same_messages_however_long_the_thread() -> None:
    # The user's message (its write, then in the list once LangGraph gave it an id) and the reply (its write,
    # and again in the list unless LangGraph gave it its id before the write was serialized: writes are
    # saved in the background); before, every message of the thread again in each put that changes the list.
    assert _serialized_by_one_turn(5) <= 4 and _serialized_by_one_turn(40) <= 4


def test_a_message_changed_in_place_is_stored_as_changed() -> None:
    serde = Counting()
    saver = _saver(serde)
    graph = _graph(saver)
    _turns(graph, 3)
    state = graph.get_state(THREAD).values["messages"]
    first, second = state[0], state[1]
    first.additional_kwargs["tag"] = {"seen": 1}  # a dict field filled in place
    second.content = "edited"  # an attribute set anew
    graph.update_state(THREAD, {"messages": [first, second]})
    again = graph.get_state(THREAD).values["messages"]
    assert again[0].additional_kwargs == {"tag": {"seen": 1}} and again[1].content == "edited"
    again[0].additional_kwargs["tag"]["seen"] = 2  # two levels down
    graph.update_state(THREAD, {"messages": [again[0]]})
    assert graph.get_state(THREAD).values["messages"][0].additional_kwargs == {"tag": {"seen": 2}}


def test_a_value_that_could_change_type_unseen_is_serialized_each_time() -> None:
    """A message holding a tuple (or a datetime, an enum) is not taken from the memo: changed in place into
    a list it would look the same to the memo's check and serialize otherwise."""
    serde = Counting()
    saver = _saver(serde)
    message = HumanMessage("with a tuple", id="t", additional_kwargs={"pair": (1, 2)})
    plain = HumanMessage("plain", id="p")
    config: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n in (1, 2):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [message, plain]}
        checkpoint["channel_versions"] = {"messages": n}
        serde.messages = 0
        config = saver.put(config, checkpoint, {"step": n}, {"messages": n})
        assert serde.messages == (2 if n == 1 else 1)


@pytest.mark.parametrize("custom", [True, False])
def test_only_langgraphs_serializers_use_the_memo(custom: bool) -> None:
    class Other:
        """A serializer of its own (an encrypting one): what it writes may depend on more than the fields."""

        def __init__(self) -> None:
            self.inner = Counting()

        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return self.inner.dumps_typed(obj)

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return self.inner.loads_typed(data)

    serde: Any = Other() if custom else Counting()
    counted = serde.inner if custom else serde
    graph = _graph(_saver(serde))
    _turns(graph, 10)
    counted.messages = 0
    _turns(graph, 1, 10)
    assert (counted.messages > 20) is custom
