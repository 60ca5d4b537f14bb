"""One SQLite file, every part, many processes: zero errors, and every acknowledged write is there.

The README's default is one file for everything: the checkpointer, the store (with its vector and
keyword indexes), the memory client, extraction and the usage ledger. Here real processes (forked before
any connection is opened, so they share nothing but the file) do all of that at once: agent turns (which
also record each model call in the ledger), memory appends and searches, indexed store puts and
searches, extraction runs (turns indexed, watermark moved) and ledger records. Each child reports what it was told succeeded and every error it saw.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import traceback
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from remem import Memory, Settings, run_turn
from remem.errors import StorageError
from remem.layout import thread_messages
from remem.testing import FakeEmbedder
from tests.lease_workers import agent_for, replying_model

_CTX = multiprocessing.get_context("fork")
DIMS = FakeEmbedder().dims  # the memory client's fake embedder: one index for the file (see below)
ROUNDS = 25
_SETTINGS = Settings(embedder="fake")


def _store_index() -> dict[str, Any]:
    return {"dims": DIMS, "embed": FakeEmbedder(), "fields": ["text"]}


def _turns(path: str, worker: int, rounds: int) -> list[str]:
    """Agent turns on remem's SqliteSaver; each model call goes to the ledger in the same file."""
    from remem.checkpoint import SqliteSaver

    acked = []
    with SqliteSaver.from_conn_string(path) as saver:
        agent = agent_for(saver)
        for i in range(rounds):
            run_turn(agent, f"turns-{worker}", f"t{worker} q{i}")
            acked.append(f"t{worker} q{i}")
    return acked


def _appends(path: str, worker: int, rounds: int) -> list[str]:
    """Memory appends (messages indexed for recall) and searches through the memory client."""
    acked = []
    with Memory.from_url(f"sqlite:///{path}", settings=_SETTINGS) as memory:
        thread = memory.thread(f"memory-{worker}", user_id=f"u{worker}")
        for i in range(rounds):
            thread.add_messages(
                [{"role": "user", "content": f"m{worker} note {i} on tea", "id": f"m{worker}-{i}"}]
            )
            acked.append(f"m{worker}-{i}")
            memory.search(f"note {i} tea", thread_id=f"memory-{worker}", k=3)
    return acked


def _puts(path: str, worker: int, rounds: int) -> list[str]:
    """An indexed store: puts, gets that refresh a TTL (reads that write), hybrid searches."""
    from remem.store import SqliteStore

    acked = []
    with SqliteStore.from_conn_string(path, index=_store_index(), ttl={"default_ttl": 60}) as store:
        for i in range(rounds):
            store.put(("docs", f"s{worker}"), f"k{i}", {"text": f"store {worker} item {i} about rivers"})
            acked.append(f"k{i}")
            store.get(("docs", f"s{worker}"), f"k{max(i - 1, 0)}", refresh_ttl=True)
            store.search(("docs",), query=f"item {i} rivers", limit=5)
    return acked


def _records(path: str, worker: int, rounds: int) -> list[str]:
    """The usage ledger opened on its own, recording calls and reading totals."""
    from remem.usage import Meter, open_ledger

    acked = []
    with open_ledger(f"sqlite:///{path}") as ledger:
        meter = Meter(ledger)
        for i in range(rounds):
            call = f"l{worker}-{i}"
            meter.record(
                "chat", "fake", input_tokens=10, output_tokens=5, thread_id=f"ledger-{worker}", call_id=call
            )
            acked.append(call)
            ledger.totals(by="model")
    return acked


def _extracts(path: str, worker: int, rounds: int) -> list[str]:
    """Extraction without a model: it indexes new turns for recall and moves its watermark."""
    from remem.extraction import MemoryExtractor
    from remem.store import SqliteStore

    acked = []
    messages: list[Any] = []
    with SqliteStore.from_conn_string(path, index=_store_index()) as store:
        extractor = MemoryExtractor(store)
        for i in range(rounds):
            messages.append(HumanMessage(f"e{worker} said {i} about boats", id=f"e{worker}-{i}"))
            extractor.run(messages, user_id=f"u{worker}", thread_id=f"extract-{worker}")
            acked.append(f"e{worker}-{i}")
    return acked


_PARTS = {"turns": _turns, "appends": _appends, "puts": _puts, "records": _records, "extracts": _extracts}


def _child(part: str, path: str, worker: int, rounds: int, start: Any, out: Any) -> None:
    acked: list[str] = []
    error = ""
    try:
        start.wait()
        acked = _PARTS[part](path, worker, rounds)
    except BaseException:
        error = traceback.format_exc(limit=6)
    out.put((part, worker, acked, error))


def _run(
    path: str, parts: list[tuple[str, int]], rounds: int, timeout: float = 240
) -> list[tuple[str, int, list[str], str]]:
    start = _CTX.Barrier(len(parts))
    out = _CTX.Queue()
    children = [_CTX.Process(target=_child, args=(part, path, w, rounds, start, out)) for part, w in parts]
    for child in children:
        child.start()
    results = [out.get(timeout=timeout) for _ in children]
    for child in children:
        child.join(timeout)
    assert [c.exitcode for c in children] == [0] * len(children)
    return results


def _missing(path: str, results: list[tuple[str, int, list[str], str]]) -> list[str]:
    """Every acknowledged write that a fresh reader of the file does not find."""
    from remem.checkpoint import SqliteSaver
    from remem.store import SqliteStore
    from remem.usage import open_ledger

    missing: list[str] = []
    with (
        SqliteSaver.from_conn_string(path) as saver,
        SqliteStore.from_conn_string(path) as store,
        Memory.from_url(f"sqlite:///{path}", settings=_SETTINGS) as memory,
        open_ledger(f"sqlite:///{path}") as ledger,
    ):
        agent = agent_for(saver)
        for part, worker, acked, _ in results:
            if part == "turns":
                thread = f"turns-{worker}"
                state = agent.get_state({"configurable": {"thread_id": thread}}).values
                asked = {m.text for m in state.get("messages", []) if m.type == "human"}
                missing += [q for q in acked if q not in asked]
                # one chat call per turn, recorded in the ledger of the saver's file
                if len(ledger.events(thread_id=thread, kind="chat")) < len(acked):
                    missing.append(f"{thread}: ledger rows")
            elif part == "appends":
                stored = {m.id for m in memory.get_thread(f"memory-{worker}").messages()}
                missing += [i for i in acked if i not in stored]
            elif part == "extracts":
                ns = thread_messages(f"extract-{worker}")
                missing += [i for i in acked if store.get(ns, i) is None]
            elif part == "puts":
                missing += [k for k in acked if store.get(("docs", f"s{worker}"), k) is None]
            else:
                recorded = {e.call_id for e in ledger.events(thread_id=f"ledger-{worker}")}
                missing += [c for c in acked if c not in recorded]
    return missing


@pytest.mark.slow
def test_every_part_shares_one_file_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "remem.db")
    parts = [(part, w) for part in _PARTS for w in range(2)]  # ten processes, two of each part
    results = _run(path, parts, ROUNDS)
    errors = [f"{part} {w}: {error}" for part, w, _, error in results if error]
    assert errors == [], "\n".join(errors[:3])
    assert sorted(len(acked) for *_, acked, _ in results) == [ROUNDS] * len(parts)
    assert _missing(path, results) == []


def test_processes_set_up_a_fresh_file_with_every_part_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh" / "new.db")
    results = _run(path, [(part, w) for part in _PARTS for w in range(2)], rounds=1)  # ten at once
    errors = [f"worker {w}: {error}" for _, w, _, error in results if error]
    assert errors == [], "\n".join(errors[:3])
    assert all(acked for *_, acked, _ in results)
    assert (Path(path).stat().st_mode & 0o777) == 0o600  # created owner-only


def test_create_agent_with_the_card_middleware_and_a_saver_on_one_file(tmp_path: Path) -> None:
    """The issue's first failure: ContextCardMiddleware(Memory.from_url(f)) and SqliteSaver(f) in one agent."""
    from langchain.agents import create_agent

    from remem.checkpoint import SqliteSaver
    from remem.middleware import ContextCardMiddleware

    path = tmp_path / "x.db"
    config: Any = {"configurable": {"thread_id": "t"}}
    questions = [f"question {i} about the garden" for i in range(6)]
    with (
        Memory.from_url(f"sqlite:///{path}", settings=_SETTINGS) as memory,
        SqliteSaver.from_conn_string(path) as saver,
    ):
        card = ContextCardMiddleware(memory, user_id="maya", compaction_token_trigger=100_000)
        agent = create_agent(model=replying_model(), tools=[], middleware=[card], checkpointer=saver)
        for question in questions:
            agent.invoke({"messages": [HumanMessage(question)]}, config)
        messages = agent.get_state(config).values["messages"]
        stored = memory.get_thread("t").messages()
    assert [m.text for m in messages if m.type == "human"] == questions
    assert [m.content for m in stored] == [m.text for m in messages]


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def _assert_says_busy(message: str, name: str) -> None:
    assert "busy" in message and name in message, message
    assert "another process" in message and "retry" in message, message
    assert "permission" not in message, message


def test_a_busy_file_is_named_busy_by_the_saver_and_the_ledger(tmp_path: Path) -> None:
    """Past the busy timeout each part says the file is busy and what to do, never "permissions"."""
    from langgraph.checkpoint.base import empty_checkpoint

    from remem.checkpoint import SqliteSaver
    from remem.usage import Meter, open_ledger

    path = tmp_path / "busy.db"
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with SqliteSaver.from_conn_string(path) as saver, open_ledger(f"sqlite:///{path}") as ledger:
        saver.setup()
        saver.conn.execute("PRAGMA busy_timeout = 100")
        ledger.conn.execute("PRAGMA busy_timeout = 100")
        holder = _hold_write_lock(path)
        try:
            with pytest.raises(StorageError) as saver_error:
                saver.put(config, empty_checkpoint(), {}, {})
            with pytest.raises(StorageError) as ledger_error:
                Meter(ledger).record("chat", "fake", input_tokens=1, output_tokens=1)
            assert saver.get_tuple(config) is None  # reads do not wait for a writer (WAL)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        _assert_says_busy(str(saver_error.value), "busy.db")
        _assert_says_busy(str(ledger_error.value), "busy.db")
        saver.put(config, empty_checkpoint(), {}, {})  # free again: the write goes through
        assert saver.get_tuple(config) is not None


def test_two_indexes_of_different_sizes_on_one_file_never_break_a_search(tmp_path: Path) -> None:
    """The memory client (its embedder's size) and an application's own indexed store on the same file:
    a search from either finds its own items, or says clearly that the sizes differ; never a numpy error."""
    from remem.errors import ConfigError
    from remem.store import SqliteStore

    path = tmp_path / "x.db"
    with Memory.from_url(f"sqlite:///{path}", settings=_SETTINGS) as memory:
        memory.thread("t", user_id="maya").add_messages([{"role": "user", "content": "tea by the river"}])
    other = {"dims": 8, "embed": FakeEmbedder(8, seed=1), "fields": ["text"]}
    try:
        with SqliteStore.from_conn_string(path, index=other) as store:
            store.put(("docs",), "k", {"text": "rivers and tea"})
            found = [item.key for item in store.search(("docs",), query="rivers")]
    except ConfigError as exc:  # refused when opened, put or searched: each is clear
        assert "dims" in str(exc)
    else:
        assert found == ["k"]
