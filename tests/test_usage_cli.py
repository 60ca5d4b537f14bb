"""``remem usage`` and ``remem export`` on a real SQLite file and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
from remem.agent import thread_config
from remem.cli import main
from remem.testing import offline_settings
from remem.usage import UsageEvent, open_ledger


def _seed(db_url: str) -> None:
    with checkpointer_from_url(db_url) as saver:
        # ledger=False: the rows below stand for the thread's calls (the agent would record its own).
        agent = build_agent(
            ScriptedChatModel(default="Sunny."), strategy="filter", checkpointer=saver, ledger=False
        )
        run_turn(agent, "t1", "Weather?")
        call = {"name": "lookup", "args": {"city": "Lyon"}, "id": "c1"}
        agent.update_state(
            thread_config("t1"),
            {
                "messages": [
                    HumanMessage("And in Lyon?"),
                    AIMessage("", tool_calls=[call]),
                    ToolMessage("sunny", tool_call_id="c1", name="lookup"),
                    AIMessage("Sunny in Lyon."),
                ]
            },
            as_node="call_model",
        )
    now = time.time()
    with open_ledger(db_url) as ledger:
        for turn, model, cost in ((1, "gpt-x", 0.25), (2, "gpt-x", 0.5), (2, "gpt-y", None)):
            ledger.record(
                UsageEvent(
                    kind="chat",
                    model=model,
                    input_tokens=100 * turn,
                    output_tokens=10,
                    thread_id="t1",
                    user_id="maya",
                    turn=turn,
                    latency_ms=12.5,
                    cost=cost,
                    at=now - 10,
                )
            )
        ledger.record(
            UsageEvent(kind="embedder", model="minilm", input_tokens=7, output_tokens=0, at=now - 30 * 86400)
        )


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_usage_totals_by_model_turn_and_since_in_every_format(db_url: str) -> None:
    _seed(db_url)
    data = json.loads(_run("usage", "--db", db_url, "--by", "model", "--json"))
    assert {r["model"]: r["calls"] for r in data["rows"]} == {"gpt-x": 2, "gpt-y": 1, "minilm": 1}
    assert data["total"]["calls"] == 4 and data["total"]["unpriced_calls"] == 2
    recent = json.loads(_run("usage", "--db", db_url, "--since", "7d", "--json"))
    assert len(recent["rows"]) == 3 and recent["total"]["cost"] == 0.75
    lines = _run("usage", "--db", db_url, "--by", "turn", "--thread", "t1", "--format", "jsonl").splitlines()
    assert [(json.loads(x)["turn"], json.loads(x)["calls"]) for x in lines] == [(1, 1), (2, 2)]
    csv_text = _run("usage", "--db", db_url, "--by", "day", "--format", "csv")
    assert csv_text.splitlines()[0].startswith("day,calls,input_tokens")
    table = _run("usage", "--db", db_url, "--by", "user", "--user", "maya")
    assert "maya" in table and "total" in table and "0.750000" in table and "have no price" in table


def test_export_gives_each_turn_its_messages_and_its_ledger_totals(db_url: str) -> None:
    _seed(db_url)
    records = [json.loads(x) for x in _run("export", "t1", "--db", db_url).splitlines()]
    assert records[0] == {
        "type": "thread",
        "format": "remem.transcript/1",
        "thread": "t1",
        "source": records[0]["source"],
    }
    turns = [r for r in records if r["type"] == "turn"]
    assert [(t["turn"], t["calls"], t["models"], t["input_tokens"]) for t in turns] == [
        (1, 1, ["gpt-x"], 100),
        (2, 2, ["gpt-x", "gpt-y"], 400),
    ]
    messages = [r for r in records if r["type"] == "message"]
    assert [(m["turn"], m["role"]) for m in messages] == [
        (1, "user"),
        (1, "assistant"),
        (2, "user"),
        (2, "assistant"),
        (2, "tool"),
        (2, "assistant"),
    ]
    assert messages[3]["tool_calls"][0]["name"] == "lookup" and messages[4]["tool_call_id"] == "c1"
    md = _run("export", "t1", "--db", db_url, "--format", "md")
    assert "## Turn 2" in md and "gpt-x, gpt-y" in md and "tokens in/out/cached: 400/20/0" in md
    assert json.loads(_run("export", "t1", "--db", db_url, "--json"))["records"] == records[1:]


def test_reading_usage_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    with checkpointer_from_url(path) as saver:
        # ledger=False: a database without a ledger (as one written before it was wired in).
        agent = build_agent(ScriptedChatModel(), strategy="filter", checkpointer=saver, ledger=False)
        run_turn(agent, "t", "hi")
    before = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert "no usage recorded" in _run("usage", "--db", f"sqlite:///{path}")
    export = [json.loads(x) for x in _run("export", "t", "--db", f"sqlite:///{path}").splitlines()]
    assert [r["type"] for r in export] == ["thread", "message", "message", "turn"]
    assert export[-1]["cost"] is None and export[-1]["calls"] == 0
    after = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert after == before
    missing = CliRunner().invoke(main, ["export", "nope", "--db", f"sqlite:///{path}"])
    assert missing.exit_code == 1 and "'nope' is neither in the checkpoints" in missing.output


def test_export_reads_a_memory_client_thread_when_no_checkpoint_holds_it(tmp_path: Path) -> None:
    from remem import Memory

    url = f"sqlite:///{tmp_path / 'mem.db'}"
    with Memory.from_url(url, settings=offline_settings()) as memory:
        memory.thread("m1", user_id="maya").add_messages(
            [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "one"},
                {"role": "user", "content": "second"},
            ]
        )
    result = CliRunner().invoke(main, ["export", "m1", "--db", url], env={"REMEM_EMBEDDER": "fake"})
    assert result.exit_code == 0, result.output
    records = [json.loads(x) for x in result.output.splitlines()]
    assert records[0]["source"].startswith("memory store in")
    assert [(r["type"], r["turn"]) for r in records[1:]] == [
        ("message", 1),
        ("message", 1),
        ("turn", 1),
        ("message", 2),
        ("turn", 2),
    ]


def test_by_turn_the_table_is_followed_by_a_chart_of_tokens_per_turn(db_url: str) -> None:
    _seed(db_url)
    out = _run("usage", "--db", db_url, "--by", "turn", "--thread", "t1")
    chart = out[out.index("tokens per turn") :].splitlines()
    turn1, turn2 = (line for line in chart if "│" in line)
    # Turn 2 (420 tokens) is the longest bar (40 cells); turn 1 (110 tokens) about a quarter of it.
    assert turn2.count("█") + turn2.count("▒") == 40 and turn1.count("█") + turn1.count("▒") == 10
    assert turn1.count("█") == round(100 / 420 * 40)  # input, then output
    assert "110 tok" in turn1 and "cost 0.250000" in turn1 and "420 tok" in turn2
    assert "tokens per turn" not in _run("usage", "--db", db_url, "--by", "model")


def _colour_share(path: Path, hex_colour: str) -> float:
    from matplotlib.image import imread

    pixels = imread(str(path))[:, :, :3]
    target = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    close = (abs(pixels - target) < 0.02).all(axis=2)
    return float(close.mean())


def test_plot_writes_a_png_of_tokens_and_cost_per_turn(db_url: str, tmp_path: Path) -> None:
    _seed(db_url)
    png = tmp_path / "usage.png"
    out = _run("usage", "--db", db_url, "--thread", "t1", "--plot", str(png))
    assert "wrote a chart of 2 turn(s)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Bars of each series are drawn: input (blue), output (red), cost (green).
    assert _colour_share(png, "#4477aa") > 0.01
    assert _colour_share(png, "#ee6677") > 0.0005
    assert _colour_share(png, "#228833") > 0.01
    empty = CliRunner().invoke(
        main, ["usage", "--db", db_url, "--thread", "nobody", "--plot", str(tmp_path / "x.png")]
    )
    assert empty.exit_code == 1 and "nothing to plot" in empty.output
    assert not (tmp_path / "x.png").exists()


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    result = CliRunner().invoke(
        main, ["usage", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--plot", str(tmp_path / "u.png")]
    )
    assert result.exit_code == 1 and "pip install 'remem[plot]'" in result.output


def _export(db_url: str, thread_id: str, *extra: str) -> list[dict[str, object]]:
    out = _run("export", thread_id, "--db", db_url, *extra)
    return [json.loads(line) for line in out.splitlines()]


def test_export_of_the_demo_thread_pairs_each_turn_with_its_own_ledger_row(db_url: str) -> None:
    from remem.config import Settings
    from remem.demo import load_script, run_demo

    report = run_demo(Settings(database_url=db_url, embedder="fake"), thread_id="demo")  # summary, 65 turns
    script = load_script()
    records = _export(db_url, "demo")
    with open_ledger(db_url) as ledger:
        sent = {e.turn: e.input_tokens for e in ledger.events(thread_id="demo") if e.kind == "chat"}
    assert sorted(sent) == list(range(1, len(script) + 1))
    # Each message kept in the state sits under the turn that said it, with that turn's ledger row.
    kept = [r for r in records if r["type"] == "message" and r["role"] == "user"]
    assert len(kept) == report.messages_in_state // 2 < len(script)
    for message in kept:
        assert message["content"] == script[int(message["turn"]) - 1]["user"], message  # type: ignore[call-overload]
    turns = {r["turn"]: r for r in records if r["type"] == "turn"}
    assert sorted(turns) == sorted(sent)  # every ledger row once, none invented
    assert all(turns[n]["input_tokens"] == sent[n] for n in sent)
    # The turns the summary replaced are named, with the summary itself, before the kept turns.
    first_kept = min(int(m["turn"]) for m in kept)  # type: ignore[call-overload]
    assert records[1] == {"type": "summary", "replaces_turns": [1, first_kept - 1], "content": report.summary}
    assert [turns[n].get("in_state") for n in (1, first_kept - 1, first_kept)] == [False, False, None]
    md = _run("export", "demo", "--db", db_url, "--format", "md")
    assert f"## Summary (replaces turns 1-{first_kept - 1})" in md and f"## Turn {first_kept}\n" in md
    assert "## Turn 1\n" not in md and "- turn 1 (not in the state)" in md


def test_export_of_a_delete_strategy_thread_names_the_removed_turns(tmp_path: Path) -> None:
    from remem.config import Settings

    url = f"sqlite:///{tmp_path / 'del.db'}"
    with checkpointer_from_url(url) as saver:
        settings = Settings(strategy="delete", keep_messages=4, embedder="fake")
        agent = build_agent(ScriptedChatModel(default="ok"), checkpointer=saver, settings=settings)
        for n in range(1, 6):
            run_turn(agent, "d", f"question {n}")
    records = _export(url, "d")
    assert records[1] == {"type": "removed", "turns": [1, 3]}
    users = [(r["turn"], r["content"]) for r in records if r["type"] == "message" and r["role"] == "user"]
    assert users == [(4, "question 4"), (5, "question 5")]
    assert [r["turn"] for r in records if r["type"] == "turn"] == [1, 2, 3, 4, 5]


def test_turn_numbers_count_back_from_the_state_and_never_below_the_turns_held() -> None:
    from remem.cli.usage import turn_numbers

    def roles(*names: str) -> list[dict[str, object]]:
        return [{"role": n} for n in names]

    # The latest 2 turns of 10, the first kept message ending turn 8 (its user message was removed).
    assert turn_numbers(roles("assistant", "user", "assistant", "user", "assistant"), 10) == [8, 9, 9, 10, 10]
    # A user message not yet answered is the next turn; two user messages in a row are one turn.
    assert turn_numbers(roles("user", "assistant", "user", "user"), 4) == [4, 4, 5, 5]
    # A state whose number is behind its own turns (edited by hand), or none (a stock graph): from 1.
    assert turn_numbers(roles("user", "assistant", "user", "tool", "assistant"), 1) == [1, 1, 2, 2, 2]
    assert turn_numbers(roles("system", "user", "assistant"), None) == [None, 1, 1]


def test_no_usage_says_which_graphs_record_it(tmp_path: Path) -> None:
    # A create_agent graph without BudgetMiddleware records no call, although every reply carries
    # usage_metadata: `remem usage` says so and what to add, instead of a bare "0 calls".
    from langchain.agents import create_agent

    path = tmp_path / "stock.db"
    with checkpointer_from_url(path) as saver:
        agent = create_agent(model=ScriptedChatModel(default="hi"), tools=[], checkpointer=saver)
        agent.invoke({"messages": [HumanMessage(content="hello")]}, thread_config("t"))
    shown = _run("usage", "--db", f"sqlite:///{path}")
    assert "no usage recorded" in shown and "BudgetMiddleware" in shown and "build_agent" in shown
