"""What the cross-process budget tests run in child processes: one user's agents, each on its own thread.

The children come from a forkserver that has this module (remem, LangChain, psycopg) imported already,
so a child costs milliseconds. Each child writes what it saw to a file, line by line, so a SIGKILL loses
nothing of it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from remem.errors import BudgetExceededError
from remem.middleware import BudgetMiddleware
from remem.models import ScriptedChatModel
from remem.usage import Budgets, open_ledger

USER = "maya"
_CONTEXT: Any = None


def context() -> Any:
    """The multiprocessing context the tests start children with (a preloaded forkserver)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["tests.budget_workers"])
    return _CONTEXT


def _slow_reply(messages: list[BaseMessage]) -> str:
    time.sleep(0.2)  # long enough for the other processes' calls to overlap this one
    return "noted: " + messages[-1].text


def spend_worker(url: str, thread: str, budget: int, start: Any, out: str, **gate: Any) -> None:
    """Turns on ``thread`` for :data:`USER` under a user-day token budget, until the budget refuses one;
    writes ``sent`` per model call and ``refused`` at the end."""
    with open_ledger(url) as ledger, open(out, "a", encoding="utf-8") as log:
        model = ScriptedChatModel(default=_slow_reply)
        middleware = BudgetMiddleware(ledger, budgets=Budgets(user_day_tokens=budget), **gate)
        agent = create_agent(model=model, tools=[], middleware=[middleware], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": thread, "user_id": USER}}
        start.wait()
        for i in range(200):
            try:
                agent.invoke({"messages": [HumanMessage(content=f"{thread} question {i} " * 5)]}, config)
            except BudgetExceededError:
                log.write("refused\n")
                return
            log.write("sent\n")
            log.flush()


def hanging_worker(url: str, thread: str, budget: int, ready: str, **gate: Any) -> None:
    """One call whose model never answers (the test SIGKILLs this process): its hold stays behind."""
    with open_ledger(url) as ledger:

        def hang(messages: list[BaseMessage]) -> str:
            partial = Path(ready + ".partial")  # renamed whole: the test never reads half a file
            partial.write_text(json.dumps({"pid": os.getpid()}))
            partial.rename(ready)
            threading.Event().wait()
            return "never"

        middleware = BudgetMiddleware(ledger, budgets=Budgets(user_day_tokens=budget), **gate)
        agent = create_agent(
            model=ScriptedChatModel(default=hang),
            tools=[],
            middleware=[middleware],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": thread, "user_id": USER}}
        agent.invoke({"messages": [HumanMessage(content="a long question " * 20)]}, config)
