"""The CLI's reading commands on a real ``remem serve`` (``--db http://...``): ``usage``, ``export``,
``state``, ``history`` and ``checkpoints stats|prune`` read the key's tenant's ledger rows and checkpoints
through the server's ``/v1`` endpoints, and see nothing of another tenant's; the key comes from
``--api-key`` or ``REMEM_API_KEY`` and is never printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from remem.server.keys import create_key
from remem.store import open_store
from tests.server_process import Server, running_server

pytest.importorskip("fastapi")
pytestmark = pytest.mark.xdist_group("server_cli")  # the module's server starts once, in one worker


@dataclass
class Served:
    server: Server
    db: str
    a: str
    b: str


def _checkpointed(url: str, key: str, thread_id: str, texts: list[str]) -> None:
    """A thread of ``key``'s tenant in the server's checkpointer, one checkpoint per message (through the
    LangGraph SDK's endpoints)."""
    with httpx.Client(base_url=url, headers={"X-Api-Key": key}, timeout=60) as c:
        assert c.post("/threads", json={"thread_id": thread_id}).status_code == 200
        for n, text in enumerate(texts):
            role = "human" if n % 2 == 0 else "ai"
            message = {"type": role, "content": text, "id": f"{thread_id}-{n}"}
            answer = c.post(f"/threads/{thread_id}/state", json={"values": {"messages": [message]}})
            assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from remem.usage import Meter, open_ledger

    db = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'served.db'}"
    with open_store(db) as store:
        a, _ = create_key(store, tenant="a")
        b, _ = create_key(store, tenant="b")
    with running_server(db) as server:
        _checkpointed(server.url, a, "trip", ["book a train to Porto", "Booked", "and a hotel", "Done"])
        _checkpointed(server.url, b, "trip", ["b's own trip to Oslo", "Noted"])
        with open_ledger(db) as ledger:
            meter = Meter(ledger)
            for turn, tokens in ((1, 100), (2, 40)):
                meter.record(
                    "chat",
                    "m-a",
                    input_tokens=tokens,
                    output_tokens=5,
                    thread_id="tenants:a:trip",
                    user_id="tenants:a:ana",
                    turn=turn,
                )
            meter.record("chat", "m-b", input_tokens=7, output_tokens=1, thread_id="tenants:b:trip", turn=1)
            meter.record("chat", "m-none", input_tokens=3, output_tokens=1, thread_id="trip", turn=1)
        yield Served(server, db, a, b)


def _run(served: Served, *args: str, key: str | None = None, env_key: str | None = None) -> Result:
    from remem.cli import main

    command = [*args, "--db", served.server.url, *(["--api-key", key] if key is not None else [])]
    return CliRunner().invoke(main, command, env={"REMEM_API_KEY": env_key or ""})


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_usage_reads_the_tenants_ledger_rows_through_the_server(served: Served) -> None:
    rows = _json(_run(served, "usage", "--json", key=served.a))
    assert [(r["model"], r["thread"], r["user"], r["turn"]) for r in rows["rows"]] == [
        ("m-a", "trip", "ana", 1),
        ("m-a", "trip", "ana", 2),
    ]
    assert rows["total"]["calls"] == 2 and rows["total"]["input_tokens"] == 140
    by_turn = _json(_run(served, "usage", "--by", "turn", "--json", key=served.a))
    assert [(r["thread"], r["turn"], r["input_tokens"]) for r in by_turn["rows"]] == [
        ("trip", 1, 100),
        ("trip", 2, 40),
    ]
    by_thread = _json(_run(served, "usage", "--by", "thread", "--thread", "trip", "--json", env_key=served.b))
    assert [(r["thread"], r["calls"], r["input_tokens"]) for r in by_thread["rows"]] == [("trip", 1, 7)]
    assert _json(_run(served, "usage", "--user", "ana", "--json", key=served.b))["rows"] == []
    table = _run(served, "usage", "--by", "model", key=served.a)
    assert table.exit_code == 0 and "m-a" in table.output and "m-b" not in table.output, table.output


def test_export_state_and_history_read_the_tenants_checkpoints(served: Served) -> None:
    exported = _json(_run(served, "export", "trip", "--json", key=served.a))
    assert exported["source"].startswith("checkpoints in remem serve at")
    messages = [r for r in exported["records"] if r["type"] == "message"]
    assert [m["content"] for m in messages] == ["book a train to Porto", "Booked", "and a hotel", "Done"]
    turns = [(r["turn"], r["input_tokens"]) for r in exported["records"] if r["type"] == "turn"]
    assert turns == [(1, 100), (2, 40)]
    assert "Oslo" not in json.dumps(exported)

    state = _json(_run(served, "state", "trip", "--json", key=served.a))
    assert state["thread"] == "trip" and state["message_count"] == 4
    assert [m["content"] for m in state["messages"]][-1] == "Done"
    history = _json(_run(served, "history", "trip", "--json", key=served.a))["checkpoints"]
    assert len(history) >= 4 and history[0]["message_count"] == 4
    first = history[-1]["checkpoint"]
    earlier = _json(_run(served, "state", "trip", "--checkpoint", first, "--json", key=served.a))
    assert earlier["message_count"] < 4
    shown = _run(served, "history", "trip", key=served.a)
    assert shown.exit_code == 0 and "history of trip" in shown.output

    listed = _json(_run(served, "threads", "--json", key=served.a))["threads"]
    assert {"thread": "trip", "in": ["checkpoints"]} in listed
    b_state = _json(_run(served, "state", "trip", "--json", key=served.b))
    assert [m["content"] for m in b_state["messages"]] == ["b's own trip to Oslo", "Noted"]
    missing = _run(served, "state", "no-such-thread", key=served.a)
    assert missing.exit_code == 1 and "no-such-thread" in missing.output
    assert "tenants:" not in missing.output  # the server's own id of the thread stays inside
    assert _run(served, "state", first, "--checkpoint", first, key=served.b).exit_code == 1


def test_checkpoint_stats_and_prune_see_the_tenants_threads_only(served: Served) -> None:
    _checkpointed(served.server.url, served.a, "old", ["one", "two", "three"])
    stats = _json(_run(served, "checkpoints", "stats", "--json", key=served.a))
    assert {t["thread"] for t in stats["threads"]} == {"trip", "old"}
    assert stats["storage_bytes"] == sum(t["bytes"] for t in stats["threads"]) > 0
    b_stats = _json(_run(served, "checkpoints", "stats", "--json", key=served.b))
    assert [t["thread"] for t in b_stats["threads"]] == ["trip"]
    before = {t["thread"]: t["checkpoints"] for t in stats["threads"]}

    refused = _run(served, "checkpoints", "prune", "--thread", "old", "--yes", key=served.b)
    assert refused.exit_code == 1 and "old" in refused.output
    pruned = _run(served, "checkpoints", "prune", "--thread", "old", "--yes", key=served.a)
    assert pruned.exit_code == 0, pruned.output
    assert f"deleted {before['old'] - 1} checkpoint(s) from 1 thread(s)" in pruned.output
    after = {
        t["thread"]: t["checkpoints"]
        for t in _json(_run(served, "checkpoints", "stats", "--json", key=served.a))["threads"]
    }
    assert after == {"trip": before["trip"], "old": 1}
    state = _json(_run(served, "state", "old", "--json", key=served.a))
    assert [m["content"] for m in state["messages"]] == ["one", "two", "three"]
    assert [
        t["checkpoints"]
        for t in _json(_run(served, "checkpoints", "stats", "--json", key=served.b))["threads"]
    ] == [b_stats["threads"][0]["checkpoints"]]


def test_the_api_key_option_is_used_and_never_printed(served: Served) -> None:
    wrong = "rmk_not-a-key-0123456789"
    refused = _run(served, "usage", key=wrong)
    assert refused.exit_code != 0 and "API key" in refused.output
    assert wrong not in refused.output
    # --api-key wins over the variable
    chosen = _run(served, "usage", "--json", key=served.a, env_key=served.b)
    assert {r["model"] for r in _json(chosen)["rows"]} == {"m-a"}
    table = _run(served, "usage", key=served.a)
    assert table.exit_code == 0
    from remem.cli import main

    local = CliRunner().invoke(main, ["usage", "--db", served.db, "--api-key", served.a])
    assert local.exit_code == 2 and "--api-key is for a remem serve URL" in local.output
    assert served.a not in local.output
    for result in (refused, chosen, table):
        assert served.a not in result.output and served.b not in result.output
