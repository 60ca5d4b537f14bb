"""``remem checkpoints stats`` and ``remem checkpoints prune`` on a real SQLite file."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from remem.checkpoint import SqliteSaver
from remem.cli import main
from remem.cli.checkpoints import parse_age


def _fill(path: Path, threads: dict[str, int]) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda s: {"messages": [AIMessage("ok " + str(s["messages"][-1].content))]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    with SqliteSaver.from_conn_string(path) as saver:
        graph = builder.compile(checkpointer=saver)
        for thread_id, turns in threads.items():
            for i in range(turns):
                graph.invoke(
                    {"messages": [("user", f"hello {i}")]}, {"configurable": {"thread_id": thread_id}}
                )


def test_stats_lists_threads_newest_first(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    _fill(db, {"alpha": 2, "beta": 1})
    result = CliRunner().invoke(main, ["checkpoints", "stats", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    assert result.output.index("beta") < result.output.index("alpha")
    assert "2 threads, 9 checkpoints" in result.output


def test_prune_keep_latest_then_delete(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    _fill(db, {"alpha": 3, "beta": 2})
    url = f"sqlite:///{db}"
    runner = CliRunner()
    result = runner.invoke(main, ["checkpoints", "prune", url, "--thread", "alpha"])
    assert result.exit_code == 0, result.output
    assert "deleted 8 checkpoint(s) from 1 thread(s)" in result.output
    result = runner.invoke(main, ["checkpoints", "prune", url, "--all", "--older-than", "30d"])
    assert "deleted 0 checkpoint(s) from 2 thread(s)" in result.output
    result = runner.invoke(main, ["checkpoints", "prune", url, "--all", "--strategy", "delete"], input="n\n")
    assert result.exit_code == 1  # aborted at the question: nothing deleted
    result = runner.invoke(
        main, ["checkpoints", "prune", url, "--thread", "beta", "--strategy", "delete", "--yes"]
    )
    assert "deleted 1 thread(s)" in result.output
    with SqliteSaver.from_conn_string(db) as saver:
        assert saver.list_threads() == ["alpha"]
        assert len(list(saver.list({"configurable": {"thread_id": "alpha"}}))) == 1


def test_usage_errors_are_clean(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["checkpoints", "prune", f"sqlite:///{tmp_path / 'cp.db'}"])
    assert result.exit_code == 2 and "--thread ID" in result.output
    result = runner.invoke(main, ["checkpoints", "stats", "memory://"])
    assert result.exit_code == 2 and "memory:// keeps nothing" in result.output
    result = runner.invoke(main, ["checkpoints", "stats", "mysql://x"])
    assert result.exit_code == 2 and "unsupported database URL" in result.output
    assert "Traceback" not in result.output


def test_parse_age() -> None:
    assert parse_age("30d") == timedelta(days=30)
    assert parse_age(" 12h ") == timedelta(hours=12)
    assert parse_age("2w") == timedelta(weeks=2)
    with pytest.raises(Exception, match="not an age"):
        parse_age("soon")


def test_an_age_too_long_for_the_calendar_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "checkpoints",
            "prune",
            f"sqlite:///{tmp_path / 'c.db'}",
            "--all",
            "--older-than",
            "99999999999999d",
            "--yes",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "before the calendar starts" in result.output and "Traceback" not in result.output


def test_pruning_a_thread_that_is_not_there_is_an_error_not_a_success(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    _fill(db, {"alpha": 2})
    result = CliRunner().invoke(main, ["checkpoints", "prune", "--db", f"sqlite:///{db}", "--thread", "nope"])
    assert result.exit_code == 1, result.output
    assert "no thread 'nope'" in result.stderr and "deleted" not in result.output
    with SqliteSaver.from_conn_string(db) as saver:
        assert len(list(saver.list({"configurable": {"thread_id": "alpha"}}))) > 1  # untouched


def test_db_option_and_the_older_positional_url_name_one_database(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    _fill(db, {"alpha": 1})
    runner = CliRunner()
    by_option = runner.invoke(main, ["checkpoints", "stats", "--db", f"sqlite:///{db}"])
    assert by_option.exit_code == 0 and "alpha" in by_option.output
    by_env = runner.invoke(main, ["checkpoints", "stats"], env={"REMEM_DATABASE_URL": f"sqlite:///{db}"})
    assert by_env.exit_code == 0 and "alpha" in by_env.output
    both = runner.invoke(main, ["checkpoints", "stats", "sqlite:///other.db", "--db", f"sqlite:///{db}"])
    assert both.exit_code == 2 and "give the database once" in both.output
