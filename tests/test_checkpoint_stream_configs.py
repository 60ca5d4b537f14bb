"""Nothing of remem's appears in a config LangGraph streams (LangGraph's ``test_debug_retry`` style).

remem marks what a run loads so that its checkpoints cannot fork the thread; the mark travels in the
run's checkpoint config, which LangGraph copies into the ``checkpoints`` and ``debug`` stream payloads
(``config`` and ``parent_config``). They must equal the configs ``get_state_history`` lists, as they do
on a stock saver, on all four of remem's savers.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from tests import matrix


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("one", lambda state: {"steps": ["one"]})
    builder.add_node("two", lambda state: {"steps": ["two"]})
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    return builder.compile(checkpointer=saver)


CELLS = [
    pytest.param(("saver", flavour, backend), id=f"{flavour}-{backend}", marks=marks)
    for flavour in matrix.FLAVOURS
    for backend, marks in (("sqlite_file", []), ("postgres", [pytest.mark.postgres]))
]


@pytest.mark.parametrize("cell", CELLS)
def test_streamed_checkpoint_configs_equal_the_state_history(
    cell: tuple[str, str, str], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config = {"configurable": {"thread_id": "1"}}
    with matrix.open_cell(cell, request, tmp_path) as opened:
        graph = _graph(opened.obj)
        streamed: dict[str, list[Any]] = {"debug": [], "checkpoints": []}
        for _ in range(2):  # the first run finds the thread empty, the second starts from its head
            for mode, chunk in _stream(opened, graph, config):
                payload = chunk["payload"] if mode == "debug" else chunk
                if mode == "checkpoints" or chunk["type"] == "checkpoint":
                    streamed[mode].append(payload)
        history = list(reversed(_history(opened, graph, config)))
    assert len(history) == 8
    for mode, payloads in streamed.items():
        assert [p["config"] for p in payloads] == [s.config for s in history], mode
        assert [p["parent_config"] for p in payloads] == [s.parent_config for s in history], mode
        assert all("remem" not in repr(p["config"]) + repr(p["parent_config"]) for p in payloads)


def _stream(opened: matrix.Cell, graph: Any, config: Any) -> list[tuple[str, Any]]:
    modes = ["debug", "checkpoints"]
    if opened.runner is None:
        return list(graph.stream({"steps": []}, config, stream_mode=modes))

    async def collect() -> list[tuple[str, Any]]:
        return [c async for c in graph.astream({"steps": []}, config, stream_mode=modes)]

    return opened.runner.run(collect())


def _history(opened: matrix.Cell, graph: Any, config: Any) -> list[Any]:
    if opened.runner is None:
        return list(graph.get_state_history(config))

    async def collect() -> list[Any]:
        return [s async for s in graph.aget_state_history(config)]

    return opened.runner.run(collect())
