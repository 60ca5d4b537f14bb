"""Errors a person reads from the CLI: they name the command's options and the way forward."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver as StockSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
from remem.cli import main


def _stock_file(path: Path) -> str:
    def reply(state: MessagesState) -> dict[str, object]:
        return {"messages": [AIMessage("hello")]}

    graph = StateGraph(MessagesState).add_node("reply", reply).add_edge(START, "reply")
    with StockSqliteSaver.from_conn_string(str(path)) as saver:
        graph.compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}}
        )
    return f"sqlite:///{path}"


@pytest.mark.parametrize("command", [["state", "t"], ["history", "t"]])
def test_reading_a_stock_only_file_points_to_remem_import(tmp_path: Path, command: list[str]) -> None:
    url = _stock_file(tmp_path / "stock.db")
    result = CliRunner().invoke(main, [*command, "--db", url])
    assert result.exit_code == 1
    assert "stock saver" in result.output and f"remem import {url}" in result.output, result.output


def test_card_errors_name_the_options_not_the_python_parameters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with checkpointer_from_url(url) as saver:
        agent = build_agent(ScriptedChatModel(default="ok"), strategy="filter", checkpointer=saver)
        run_turn(agent, "t", "hello")
    env = {"REMEM_EMBEDDER": "fake"}
    mixed = CliRunner().invoke(
        main, ["card", "t", "--db", url, "--except-last", "2", "--recent", "3"], env=env
    )
    assert mixed.exit_code == 2 and "--except-last requires --recent" in mixed.output, mixed.output
    zero = CliRunner().invoke(main, ["card", "t", "--db", url, "--budget", "0"], env=env)
    assert zero.exit_code == 2 and "--budget must be positive" in zero.output, zero.output
    assert "_messages" not in mixed.output + zero.output and "token_budget" not in zero.output
