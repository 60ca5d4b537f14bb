"""`remem history` on remem's savers reads message counts, never messages: the counts and rows equal what
LangGraph's own path (every message decoded) gives, on random histories of appends, edits and removals
that make stored lists, delta chains past a snapshot and short inline lists."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from remem.checkpoint import SqliteSaver
from remem.checkpoint._serde import RememSerializer
from remem.inspection import reader_graph, thread_history

THREAD = "t"
CFG: Any = {"configurable": {"thread_id": THREAD}}


def _graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda state: {"messages": [AIMessage("ok")]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


@contextmanager
def _saver() -> Iterator[SqliteSaver]:
    with tempfile.TemporaryDirectory() as tmp, SqliteSaver.from_conn_string(Path(tmp) / "cp.db") as saver:
        yield saver


# One step: append n messages, replace the message at a position, or remove one.
_step = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 12)),
    st.tuples(st.just("edit"), st.integers(0, 10_000)),
    st.tuples(st.just("remove"), st.integers(0, 10_000)),
)


def _apply(graph: Any, steps: list[tuple[str, int]]) -> None:
    said = 0
    for kind, n in steps:
        current: list[BaseMessage] = graph.get_state(CFG).values.get("messages", [])
        if kind == "add":
            new = [HumanMessage(f"message {said + i}", id=f"m{said + i}") for i in range(n)]
            said += n
            graph.update_state(CFG, {"messages": new}, as_node="reply")
        elif current:
            target = current[n % len(current)]
            change: BaseMessage = (
                HumanMessage(f"edited {n}", id=target.id)
                if kind == "edit"
                else RemoveMessage(id=str(target.id))
            )
            graph.update_state(CFG, {"messages": [change]}, as_node="reply")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 12), st.lists(_step, max_size=40), st.booleans())
def test_counts_equal_the_decoded_lists_and_rows_equal_langgraphs(
    first: int, steps: list[tuple[str, int]], run_turn: bool
) -> None:
    with _saver() as saver:
        graph = _graph(saver)
        _apply(graph, [("add", first), *steps])
        if run_turn:  # a turn writes input, loop and pending-write checkpoints too
            graph.invoke({"messages": [HumanMessage("hi")]}, CFG)
        decoded = {
            t.config["configurable"]["checkpoint_id"]: len(t.checkpoint["channel_values"].get("messages", []))
            for t in saver.list(CFG)
        }
        sized = {
            t.config["configurable"]["checkpoint_id"]: n.get("messages", 0)
            for t, n in saver.list_sized(CFG, sized=("messages",))
        }
        assert sized == decoded
        reader = reader_graph(saver)
        stock = [
            (s.metadata.get("step"), s.config["configurable"]["checkpoint_id"], s.created_at,
             len(s.values.get("messages", [])), tuple(s.next), s.metadata.get("source"))
            for s in reader.get_state_history(CFG, limit=None)
        ]  # fmt: skip
        rows = [
            (r.step, r.checkpoint_id, r.created_at, r.message_count, r.next, r.source)
            for r in thread_history(reader, THREAD, limit=None)
        ]
        assert rows == stock


class _CountingSerde(RememSerializer):
    """Counts the messages it deserializes (one by one, or many as one msgpack array)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        value = super().loads_typed(data)
        values = value if isinstance(value, list) else [value]
        self.messages += sum(isinstance(v, BaseMessage) for v in values)
        return value


def test_history_decodes_no_message_body(tmp_path: Path) -> None:
    path = tmp_path / "cp.db"
    with SqliteSaver.from_conn_string(path) as saver:
        graph = _graph(saver)
        for turn in range(30):  # past a snapshot of the stored list (every 24 versions)
            graph.update_state(
                CFG, {"messages": [HumanMessage(f"m{turn}-{i}") for i in range(5)]}, as_node="reply"
            )
        graph.invoke({"messages": [HumanMessage("last")]}, CFG)
        expected = [len(s.values["messages"]) for s in reader_graph(saver).get_state_history(CFG, limit=None)]
    serde = _CountingSerde()
    with SqliteSaver.from_conn_string(path, serde=serde) as counted:
        rows = thread_history(reader_graph(counted), THREAD, limit=None)
        assert [r.message_count for r in rows] == expected and expected[0] == 152
        # Only the last turn's input, which the graph's __start__ channel holds; neither the thread's
        # list nor the steps' pending writes.
        assert serde.messages == 1
        list(counted.list(CFG))
    assert serde.messages >= 150  # the full listing does decode them: the counter sees messages


def test_stock_savers_keep_langgraphs_path() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    graph = _graph(InMemorySaver())
    _apply(graph, [("add", 10), ("edit", 3), ("add", 4)])
    graph.invoke({"messages": [HumanMessage("hi")]}, CFG)
    rows = thread_history(graph, THREAD, limit=None)
    assert [r.message_count for r in rows] == [
        len(s.values.get("messages", [])) for s in graph.get_state_history(CFG, limit=None)
    ]
    assert rows[0].message_count == 16


def test_a_pending_update_outside_any_task_is_counted_as_langgraph_applies_it() -> None:
    with _saver() as saver:
        graph = _graph(saver)
        _apply(graph, [("add", 12), ("add", 3)])
        latest = saver.get_tuple(CFG)
        assert latest is not None
        null_task = "00000000-0000-0000-0000-000000000000"
        saver.put_writes(latest.config, [("messages", [HumanMessage("late", id="late")])], null_task)
        reader = reader_graph(saver)
        rows = thread_history(reader, THREAD, limit=None)
        stock = [len(s.values.get("messages", [])) for s in reader.get_state_history(CFG, limit=None)]
        assert [r.message_count for r in rows] == stock and stock[0] == 16
