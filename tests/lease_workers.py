"""What the concurrency and crash tests run in child processes: agent turns and memory appends on one thread.

The children are started by a forkserver that has this module (and so remem, LangGraph, psycopg)
imported already, so a child costs milliseconds, not the second and a half of a fresh interpreter.
Each child writes what it saw acknowledged to a file, line by line, so a SIGKILL loses nothing of it.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from remem import Memory, ScriptedChatModel, Settings, build_agent, run_turn
from remem.errors import RememError

THREAD = "shared"
_CONTEXT: Any = None


def context() -> Any:
    """The multiprocessing context the tests start children with (a preloaded forkserver)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["tests.lease_workers"])
    return _CONTEXT


@contextlib.contextmanager
def open_saver(kind: str, target: str) -> Iterator[Any]:
    """remem's or LangGraph's own saver on a SQLite file or a Postgres database."""
    if kind == "sqlite":
        from remem.checkpoint import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            yield saver
    elif kind == "postgres":
        from remem.checkpoint import PostgresSaver

        with PostgresSaver.from_conn_string(target) as pg:
            pg.setup()
            yield pg
    elif kind == "stock-sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver as StockSqliteSaver

        with StockSqliteSaver.from_conn_string(target) as stock:
            yield stock
    else:
        raise ValueError(kind)


def replying_model() -> ScriptedChatModel:
    return ScriptedChatModel(default=lambda messages: "reply to " + messages[-1].text)


def agent_for(saver: Any, strategy: str = "filter", model: ScriptedChatModel | None = None) -> Any:
    settings = Settings(keep_messages=4, summary_trigger_messages=5)
    return build_agent(
        model or replying_model(),
        strategy=strategy,
        summarizer="extractive",
        checkpointer=saver,
        settings=settings,
    )


def turn_worker(kind: str, target: str, worker: int, turns: int, acks: str) -> None:
    """Run ``turns`` agent turns on the shared thread; write each acknowledged question to ``acks``."""
    with open_saver(kind, target) as saver, open(acks, "a", encoding="utf-8") as out:
        agent = agent_for(saver)
        for i in range(turns):
            question = f"w{worker} q{i}"
            try:
                run_turn(agent, THREAD, question)
            except RememError as exc:  # e.g. ThreadBusyError: refused, so not acknowledged
                print(f"refused {question}: {exc}", flush=True)
                Path(acks + ".refused").write_text(f"{question}: {exc}\n")
                continue
            out.write(question + "\n")
            out.flush()


def middleware_worker(kind: str, target: str, memory_url: str, worker: int, turns: int, acks: str) -> None:
    """``turns`` bare ``create_agent(...).invoke`` calls (ContextCardMiddleware, no run_turn) on the shared
    thread; each acknowledged question goes to ``acks``, each refusal to ``acks`` + ".refused"."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from remem.errors import ThreadBusyError
    from remem.middleware import ContextCardMiddleware

    settings = Settings(embedder="fake")
    with (
        open_saver(kind, target) as saver,
        Memory.from_url(memory_url, settings=settings) as memory,
        open(acks, "a", encoding="utf-8") as out,
        open(acks + ".refused", "a", encoding="utf-8") as refused,
    ):
        card = ContextCardMiddleware(memory, user_id="maya", compaction_token_trigger=100_000)
        agent = create_agent(model=replying_model(), tools=[], middleware=[card], checkpointer=saver)
        config = {"configurable": {"thread_id": THREAD}}
        for i in range(turns):
            question = f"w{worker} q{i}"
            try:
                agent.invoke({"messages": [HumanMessage(question)]}, config)
            except ThreadBusyError as exc:  # the only refusal allowed: said clearly, never silent
                refused.write(json.dumps({"question": question, "error": str(exc)}) + "\n")
                refused.flush()
                continue
            out.write(question + "\n")
            out.flush()


def mirror_worker(kind: str, target: str, memory_url: str, worker: int, turns: int, calls: str) -> None:
    """As :func:`middleware_worker`, with the ledger recording every model call (``UsageRecorder``) and each
    call the model really answered written to ``calls``: a refused run must neither pay nor be mirrored."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from remem.errors import ThreadBusyError
    from remem.middleware import ContextCardMiddleware
    from remem.usage import UsageRecorder, ledger_for

    settings = Settings(embedder="fake")
    with (
        open_saver(kind, target) as saver,
        Memory.from_url(memory_url, settings=settings) as memory,
        open(calls, "a", encoding="utf-8") as paid,
    ):

        def answer(messages: list[BaseMessage]) -> str:
            paid.write(messages[-1].text + "\n")
            paid.flush()
            return "reply to " + messages[-1].text

        card = ContextCardMiddleware(memory, user_id="maya", compaction_token_trigger=100_000)
        agent = create_agent(
            model=ScriptedChatModel(default=answer), tools=[], middleware=[card], checkpointer=saver
        )
        recorder = UsageRecorder(ledger_for(saver))
        config: Any = {"configurable": {"thread_id": THREAD}, "callbacks": [recorder]}
        for i in range(turns):
            with contextlib.suppress(ThreadBusyError):  # refused, said clearly
                agent.invoke({"messages": [HumanMessage(f"w{worker} q{i}")]}, config)
        recorder.ledger.close()


def node_mirror_worker(kind: str, target: str, memory_url: str, worker: int, turns: int, calls: str) -> None:
    """As :func:`mirror_worker`, on a plain ``StateGraph``: ``ContextCardNode`` before a model node."""
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from remem.errors import ThreadBusyError
    from remem.middleware import ContextCardNode

    settings = Settings(embedder="fake")
    with (
        open_saver(kind, target) as saver,
        Memory.from_url(memory_url, settings=settings) as memory,
        open(calls, "a", encoding="utf-8") as paid,
    ):

        def answer(messages: list[BaseMessage]) -> str:
            paid.write(messages[-1].text + "\n")
            paid.flush()
            return "reply to " + messages[-1].text

        model = ScriptedChatModel(default=answer)
        builder = StateGraph(MessagesState)
        builder.add_node("memory", ContextCardNode(memory, user_id="maya", compaction_token_trigger=100_000))
        builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
        builder.add_edge(START, "memory")
        builder.add_edge("memory", "model")
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": THREAD}}
        for i in range(turns):
            with contextlib.suppress(ThreadBusyError):  # refused, said clearly
                graph.invoke({"messages": [HumanMessage(f"w{worker} q{i}")]}, config)


def append_worker(url: str, worker: int, count: int, acks: str) -> None:
    """Append ``count`` messages to the shared memory thread; write each acknowledged id to ``acks``.
    At the end the first message is sent again: its line records the seq it came back with."""
    settings = Settings(embedder="fake")
    with Memory.from_url(url, settings=settings) as memory, open(acks, "a", encoding="utf-8") as out:
        thread = memory.thread(THREAD, user_id="maya")
        first: dict[str, Any] | None = None
        for i in range(count):
            message = {
                "role": "user" if i % 2 else "assistant",
                "content": f"w{worker} m{i}",
                "id": f"w{worker}-m{i}",
            }
            first = first or message
            try:
                thread.add_messages([message])
            except RememError as exc:
                out.write(json.dumps({"refused": message["id"], "error": str(exc)}) + "\n")
                continue
            out.write(json.dumps({"id": message["id"]}) + "\n")
            out.flush()
        assert first is not None
        again = thread.add_messages([first])
        seq = again[0].seq if again else None  # main's client returned [] for a message sent before
        out.write(json.dumps({"resent": first["id"], "seq": seq}) + "\n")


class KillAfter:
    """Wraps a saver's writes: after the ``n``-th ``put`` or ``put_writes`` returns, SIGKILL this process."""

    def __init__(self, saver: Any) -> None:
        self.saver, self.n, self.writes = saver, 0, 0
        self.put, self.put_writes = saver.put, saver.put_writes
        saver.put, saver.put_writes = self._put, self._put_writes

    def arm(self, n: int) -> None:
        self.n, self.writes = n, 0

    def _count(self) -> None:
        self.writes += 1
        if self.n and self.writes >= self.n:
            os.kill(os.getpid(), signal.SIGKILL)

    def _put(self, *args: Any, **kwargs: Any) -> Any:
        result = self.put(*args, **kwargs)
        self._count()
        return result

    def _put_writes(self, *args: Any, **kwargs: Any) -> None:
        self.put_writes(*args, **kwargs)
        self._count()


def _write(path: str, text: str) -> None:
    Path(path + ".tmp").write_text(text)
    os.replace(path + ".tmp", path)  # whole or not at all: the parent may be polling for it


def texts(messages: list[BaseMessage]) -> list[list[str]]:
    return [[m.type, m.text] for m in messages]


def crash_worker(
    kind: str, target: str, strategy: str, follow_up: str, question: str, kill_after: int, out: str
) -> None:
    """The next turn after a kill (``follow_up``: its model calls and the state it leaves are written to
    ``out``), then ``question`` killed after its ``kill_after``-th write. With ``kill_after=0`` turns go on
    until the parent kills this process at a moment of its choosing."""
    from remem.messages import is_provider_valid

    with open_saver(kind, target) as saver:
        killer = KillAfter(saver)
        model = replying_model()
        agent = agent_for(saver, strategy, model)
        result: dict[str, Any] = {}
        if follow_up:
            run_turn(agent, THREAD, follow_up)
            messages = agent.get_state({"configurable": {"thread_id": THREAD}}).values["messages"]
            result = {
                "calls": len(model.calls),
                "messages": texts(messages),
                "valid": is_provider_valid(messages),
            }
        _write(out, json.dumps(result))
        killer.arm(kill_after)
        run_turn(agent, THREAD, question)
        _write(out + ".writes", str(killer.writes))  # not killed: the turn had fewer writes
        i = 0
        while not kill_after:
            run_turn(agent, THREAD, f"{question} more {i}")
            i += 1


def erase_worker(url: str, user_id: str, out: str) -> None:
    """``remem forget --user``'s erasure, from another process; its report's rows go to ``out``."""
    from remem.erasure import erase

    report = erase(url, user_id=user_id, wait=5)
    _write(out, json.dumps(dict(report.as_rows())))
