"""DeltaChannel graphs on remem's savers (issue 22, point 3).

A ``DeltaChannel`` keeps its value only every ``snapshot_frequency`` updates; LangGraph rebuilds it at
any other checkpoint from the saver's ``get_delta_channel_history``. The base class walks the parents
one ``get_tuple`` each, and ``get_state_history`` asks once per listed checkpoint: listing a thread read
its checkpoints a quadratic number of times. Pinned here:

- ``get_state_history`` on a DeltaChannel graph reads and decodes what it does on a plain graph (the
  same transactions, the same count of decoded values): linear in the thread, no ``get_tuple``.
- A snapshot (``_DeltaSnapshot``) is stored as the item numbers of its messages, which the writes that
  added them stored already: a DeltaChannel thread takes what a plain one does.
- ``get_state``, the history, time travel and ``update_state`` (at the head, and at old checkpoints:
  forks) give what ``InMemorySaver`` gives, on random DeltaChannel graphs (Hypothesis), and
  ``get_delta_channel_history`` equals its result for every checkpoint, asked with a listed tuple's
  config or a fresh one.
"""

from __future__ import annotations

import copy
import gc
import operator
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph

from remem.checkpoint import PostgresSaver, SqliteSaver


def _concat(state: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    return state + [x for w in writes for x in w]


def _graph(saver: Any, every: int, delta: bool = True) -> Any:
    reducer = DeltaChannel(_concat, snapshot_frequency=every) if delta else operator.add
    state = TypedDict("State", {"items": Annotated[list, reducer], "turns": int})  # type: ignore[misc]  # noqa: UP013 (a local reducer)

    def reply(state: Any) -> dict[str, Any]:
        n = len(state["items"])
        return {"items": [f"reply-{n}"], "turns": state.get("turns", 0) + 1}

    def note(state: Any) -> dict[str, Any]:
        return {"items": [f"note-{len(state['items'])}"]} if len(state["items"]) % 3 == 0 else {}

    builder = StateGraph(state)
    builder.add_node("reply", reply)
    builder.add_node("note", note)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "note")
    builder.add_edge("note", END)
    return builder.compile(checkpointer=saver)


class Counted:
    """Counts a saver's transactions, decoded values and ``get_tuple`` calls."""

    def __init__(self, saver: Any) -> None:
        self.transactions = self.decoded = self.get_tuples = 0
        run, loads, get_tuple = saver._run, saver.serde.loads_typed, saver.get_tuple

        def counted_run(*args: Any, **kwargs: Any) -> Any:
            self.transactions += 1
            return run(*args, **kwargs)

        def counted_loads(data: Any) -> Any:
            self.decoded += 1
            return loads(data)

        def counted_get_tuple(config: Any) -> Any:
            self.get_tuples += 1
            return get_tuple(config)

        saver._run, saver.get_tuple = counted_run, counted_get_tuple
        saver.serde.loads_typed = counted_loads
        saver._ctx.serde.loads_typed = counted_loads


def _history_work(tmp_path: Path, turns: int, delta: bool) -> tuple[Counted, int]:
    db = tmp_path / f"work-{turns}-{delta}.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = _graph(saver, every=10, delta=delta)
        config = {"configurable": {"thread_id": "t"}}
        for i in range(turns):
            graph.invoke({"items": [f"user-{i}"]}, config)
    with SqliteSaver.from_conn_string(str(db)) as fresh:  # nothing cached from the writes
        graph = _graph(fresh, every=10, delta=delta)
        fresh.setup()
        counted = Counted(fresh)
        history = list(graph.get_state_history(config))
    return counted, len(history)


def test_a_delta_graphs_history_does_the_work_of_a_plain_graphs(tmp_path: Path) -> None:
    for turns in (20, 40):
        delta, n = _history_work(tmp_path, turns, delta=True)
        plain, plain_n = _history_work(tmp_path, turns, delta=False)
        assert n == plain_n
        assert delta.get_tuples == 0
        assert delta.transactions == plain.transactions  # the listing's pages, nothing per checkpoint
        # the same values, once each (a plain graph's lists and a delta graph's writes share items)
        assert delta.decoded <= plain.decoded + 5, (turns, delta.decoded, plain.decoded)


def test_get_state_reads_the_ancestors_a_page_per_statement_in_one_transaction(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = _graph(saver, every=50)
        config = {"configurable": {"thread_id": "t"}}
        for i in range(30):
            graph.invoke({"items": [f"user-{i}"]}, config)
        expected = graph.get_state(config).values
    with SqliteSaver.from_conn_string(str(db)) as fresh:
        graph = _graph(fresh, every=50)
        fresh.setup()
        counted = Counted(fresh)
        assert graph.get_state(config).values == expected
        # the head, then pages of 16, 32 and 64 ancestors in one transaction: the seed is 50 checkpoints
        # back (of 120); only the seed's and the writes' values are decoded, not each ancestor's
        assert counted.get_tuples == 1
        assert counted.transactions == 1 + 1
        assert counted.decoded < 110, counted.decoded


def test_a_delta_graph_stores_what_a_plain_graph_stores(tmp_path: Path) -> None:
    """A snapshot holds the items its messages' writes stored already: 60 turns, a snapshot every 10
    updates, stored in as many items as on a plain graph, not each message again per snapshot."""
    stats = {}
    for delta in (False, True):
        with SqliteSaver.from_conn_string(str(tmp_path / f"size-{delta}.sqlite")) as saver:
            graph = _graph(saver, every=10, delta=delta)
            config = {"configurable": {"thread_id": "t"}}
            for i in range(60):
                graph.invoke({"items": [f"user-{i} " + "words " * 30]}, config)
            (stats[delta],) = saver.stats().threads
            if delta:
                snapshots = [
                    t
                    for t in saver.list(config)
                    if type(t.checkpoint["channel_values"].get("items")) is _DeltaSnapshot
                ]
                assert len(snapshots) >= 10
    assert stats[True].items <= stats[False].items + 5
    # the rest is LangGraph's counters_since_delta_snapshot in every checkpoint's metadata
    assert stats[True].bytes <= 1.2 * stats[False].bytes, (stats[True].bytes, stats[False].bytes)


# --- equality with InMemorySaver on random DeltaChannel graphs ---------------------------------------

_steps = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 99)),
        st.tuples(st.just("update"), st.integers(0, 99)),
        st.tuples(st.just("travel"), st.integers(0, 10_000)),
        st.tuples(st.just("fork"), st.integers(0, 10_000)),
        st.tuples(st.just("look"), st.integers(0, 10_000)),
    ),
    min_size=1,
    max_size=14,
)


def _apply(graph: Any, steps: list[tuple[str, int]]) -> list[Any]:
    """Runs ``steps``; returns the states the ``look`` steps read."""
    config = {"configurable": {"thread_id": "t"}}
    seen: list[Any] = []
    for kind, n in steps:
        if kind == "turn":
            graph.invoke({"items": [f"user-{n}"]}, config)
        elif kind == "update":
            graph.update_state(config, {"items": [f"edit-{n}"]})
        else:
            past = list(graph.get_state_history(config))
            if not past:
                continue
            old = past[n % len(past)].config
            if kind == "travel":
                graph.invoke({"items": [f"again-{n}"]}, old)
            elif kind == "fork":  # update_state at an old checkpoint: a branch from it
                graph.update_state(old, {"items": [f"fork-{n}"]})
            else:  # a read at an old checkpoint, by a config of its own (not the listing's)
                seen.append(graph.get_state({"configurable": dict(old["configurable"])}).values)
    return seen


def _view(graph: Any, saver: Any) -> dict[str, Any]:
    """What a user sees of the thread, without the checkpoint ids (each saver's run makes its own)."""
    config = {"configurable": {"thread_id": "t"}}
    history = list(graph.get_state_history(config))
    listed = [
        saver.get_delta_channel_history(config=s.config, channels=["items"])["items"]["writes"]
        for s in history
    ]
    fresh = [
        graph.get_state(s.config).values for s in history
    ]  # time travel reads: get_tuple's configs, not the listing's
    by_fresh_config = [
        saver.get_delta_channel_history(config=saver.get_tuple(s.config).config, channels=["items"])["items"][
            "writes"
        ]
        for s in history
    ]
    stored = [saver.get_tuple(s.config).checkpoint["channel_values"] for s in history]
    seeds = [
        saver.get_delta_channel_history(config=s.config, channels=["items"])["items"].get("seed")
        for s in history
    ]
    return {
        "stored": stored,  # _DeltaSnapshot values come back as LangGraph wrote them
        "seeds": seeds,
        "state": graph.get_state(config).values,
        "history": [(s.values, s.next, s.metadata["step"], s.metadata["source"]) for s in history],
        "fresh": fresh,
        "listed_writes": [[w[1:] for w in ws] for ws in listed],
        "fresh_writes": [[w[1:] for w in ws] for ws in by_fresh_config],
    }


@pytest.fixture
def remem_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        with SqliteSaver.from_conn_string(str(tmp_path / "eq.sqlite")) as saver:
            yield saver
    else:
        url = request.getfixturevalue("pg_url")
        with PostgresSaver.from_conn_string(url) as saver:
            yield saver


@pytest.mark.parametrize(
    "remem_saver",
    [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps, every=st.integers(1, 4))
def test_delta_graphs_read_as_on_inmemorysaver(
    remem_saver: Any, steps: list[tuple[str, int]], every: int
) -> None:
    remem_saver.delete_thread("t")  # each example starts on an empty thread
    stock = InMemorySaver()
    got = _graph(remem_saver, every)
    want = _graph(stock, every)
    assert _apply(got, steps) == _apply(want, steps)
    assert _view(got, remem_saver) == _view(want, stock)


def test_a_put_through_the_saver_drops_the_listing_it_changes(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "forget.sqlite")) as saver:
        graph = _graph(saver, every=100)
        config = {"configurable": {"thread_id": "t"}}
        for i in range(3):
            graph.invoke({"items": [f"user-{i}"]}, config)
        listed = list(saver.list(config))
        oldest_child = listed[-2]
        before = saver.get_delta_channel_history(config=oldest_child.config, channels=["items"])
        saver.put_writes(listed[-1].config, [("items", ["late"])], "another-task")
        after = saver.get_delta_channel_history(config=oldest_child.config, channels=["items"])
        fresh = saver.get_delta_channel_history(
            config=saver.get_tuple(oldest_child.config).config, channels=["items"]
        )
        assert after == fresh != before
        assert ("another-task", "items", ["late"]) in after["items"]["writes"]


def test_only_a_delta_graphs_listing_is_kept(tmp_path: Path) -> None:
    for delta in (False, True):
        with SqliteSaver.from_conn_string(str(tmp_path / f"kept-{delta}.sqlite")) as saver:
            graph = _graph(saver, every=100, delta=delta)
            config = {"configurable": {"thread_id": "t"}}
            graph.invoke({"items": ["user"]}, config)
            listed = list(saver.list(config))
            assert len(saver._listings.live()) == int(delta), delta
            del listed


def test_a_listing_lives_as_long_as_its_tuples(tmp_path: Path) -> None:
    # A long thread's listing is freed with the tuples its caller drops (the saver holds it weakly), and
    # stays answered from memory while any is held, however many listings came after it.
    with SqliteSaver.from_conn_string(str(tmp_path / "life.sqlite")) as saver:
        graph = _graph(saver, every=100)
        config = {"configurable": {"thread_id": "t"}}
        for i in range(3):
            graph.invoke({"items": [f"user-{i}"]}, config)
        listed = list(saver.list(config))
        (listing,) = saver._listings.live()
        gone = weakref.ref(listing)
        del listing
        later = [list(saver.list(config)) for _ in range(6)]  # more than the 4 listings kept before
        counted = Counted(saver)
        history = saver.get_delta_channel_history(config=listed[0].config, channels=["items"])
        assert counted.transactions == 0 and history == saver.get_delta_channel_history(
            config=saver.get_tuple(listed[0].config).config, channels=["items"]
        )
        del listed
        gc.collect()
        assert gone() is None
        assert len(saver._listings.live()) == len(later)
        del later
        gc.collect()
        assert saver._listings.live() == []
        again = list(saver.list(config))
        copied = copy.deepcopy(again[0].config)  # a copy is a plain config
        assert (
            type(again[0].config) is not dict
            and type(copied) is dict
            and saver._listings.history(copied, ["items"]) is None
        )


_WITHOUT_SNAPSHOT_NAME = """
import operator, sys
from typing import Annotated, TypedDict
import langgraph.pregel, langgraph.channels.delta  # LangGraph's own references to the name stay
import langgraph.checkpoint.serde.types as types
del types._DeltaSnapshot  # a langgraph-checkpoint 4.x without it, as remem meets it
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from remem.checkpoint import SqliteSaver, _snapshot
from remem.errors import StorageError

assert _snapshot.SNAPSHOT is None

def graph(saver):
    State = TypedDict("State", {"items": Annotated[list, DeltaChannel(operator.add, snapshot_frequency=2)]})
    builder = StateGraph(State)
    builder.add_node("reply", lambda state: {"items": [f"reply-{len(state['items'])}"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)

config = {"configurable": {"thread_id": "t"}}
with SqliteSaver.from_conn_string(sys.argv[1]) as saver:
    remem_graph, stock = graph(saver), graph(InMemorySaver())
    for i in range(7):
        for g in (remem_graph, stock):
            g.invoke({"items": [f"user-{i}"]}, config)
    assert remem_graph.get_state(config).values == stock.get_state(config).values
    got = [s.values for s in remem_graph.get_state_history(config)]
    assert got == [s.values for s in stock.get_state_history(config)], got
with SqliteSaver.from_conn_string(sys.argv[2]) as saver:
    try:
        graph(saver).get_state(config)
    except StorageError as exc:
        assert "constraints.txt" in str(exc), exc
    else:
        raise AssertionError("a compact snapshot was read without its type")
print("ok")
"""


def test_a_langgraph_checkpoint_without_the_snapshot_name_still_imports_and_stores(tmp_path: Path) -> None:
    # _DeltaSnapshot is private to langgraph-checkpoint, which remem allows at any 4.x: without it remem
    # imports, a DeltaChannel graph reads and writes as on InMemorySaver (its snapshots stored whole), and
    # a snapshot stored the compact way before fails with what to install, never read as a dict.
    import os
    import subprocess
    import sys

    import remem

    compact = tmp_path / "compact.sqlite"
    with SqliteSaver.from_conn_string(str(compact)) as saver:
        for i in range(4):
            _graph(saver, every=2).invoke({"items": [f"user-{i}"]}, {"configurable": {"thread_id": "t"}})
    src = str(Path(remem.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SNAPSHOT_NAME, str(tmp_path / "plain.sqlite"), str(compact)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
