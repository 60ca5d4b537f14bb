"""Usage from any graph: :class:`UsageRecorder`, a LangChain callback handler that records every chat model
call of a run into the ledger, from the replies' ``usage_metadata``.

    from remem.usage import UsageRecorder, ledger_for
    recorder = UsageRecorder(ledger_for(saver))
    graph.invoke(inputs, {"configurable": {"thread_id": "t1"}, "callbacks": [recorder]})
    # or once for every run: graph = graph.with_config(callbacks=[recorder])

For a plain ``StateGraph`` or a ``create_agent`` graph without ``BudgetMiddleware``, whose model calls
nothing else records. The rules:

- **Who and where**: the thread is the run's ``thread_id`` (LangGraph copies ``configurable.thread_id``
  into every run's metadata), the user the metadata's ``user_id`` (``config={"metadata": {"user_id": ...}}``)
  or the recorder's own ``user_id``; ``node`` is the LangGraph node that made the call; ``turn`` is left
  empty (only remem's agent and ``BudgetMiddleware`` number turns).
- **Once per call**: a call's id is :func:`~remem.usage._records.call_id_of` its thread and reply id, the id
  remem's agent (chat model and summariser), ``BudgetMiddleware``, ``Memory``'s summariser and the
  extractor give the same call. (A summary made in several calls, of an input above
  ``summary_max_input_tokens``, is one row of theirs: the recorder adds its calls after the first.) The row is written when the
  node (the run) that made the call ends or fails, after any of those has recorded it, so their row
  (with its turn, settling its budget hold) is the one kept and this one adds nothing. A run replayed or
  a callback repeated records nothing twice: the ledger ignores a call id it holds.
- **Tokens**: the provider's ``usage_metadata``; a reply without it is counted (``source="counted"``).
- A ledger that refuses a row is logged (``remem.usage``), never raised into the run: the reply was paid.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from remem.errors import ArgumentTypeError, RememError
from remem.usage._base import Ledger
from remem.usage._records import UsageEvent, call_id_of
from remem.usage.meter import Meter
from remem.usage.prices import PriceTable

__all__ = ["UsageRecorder"]

log = logging.getLogger("remem.usage")

_KEPT = 4096  # calls (and runs) not ended that a recorder remembers; one that never ends is dropped


@dataclass
class _Started:
    sent: list[BaseMessage]
    metadata: dict[str, Any]
    started: float
    parent: UUID | None = None
    events: list[UsageEvent] = field(default_factory=list)


class UsageRecorder(BaseCallbackHandler):
    """Records the chat model calls of the runs it is a callback of into ``ledger`` (see the module).

    ``prices`` prices them (None: unpriced, cost null); ``user_id`` is the user of calls whose run
    metadata names none. Thread-safe; one recorder serves any number of runs and threads.
    """

    def __init__(
        self, ledger: Ledger, prices: PriceTable | None = None, *, user_id: str | None = None
    ) -> None:
        if not isinstance(ledger, Ledger):
            raise ArgumentTypeError(
                f"ledger is a remem usage ledger, e.g. UsageRecorder(ledger_for(saver)); got {ledger!r}"
            )
        if user_id is not None and not isinstance(user_id, str):
            raise ArgumentTypeError(f"user_id is a text (str) or None; got {user_id!r}")
        self.meter = Meter(ledger, prices)
        self.user_id = user_id
        self._started: dict[UUID, _Started] = {}
        self._ended: dict[UUID, list[UsageEvent]] = {}  # per parent run: calls that ended, to record
        self._lock = threading.Lock()

    @property
    def ledger(self) -> Ledger:
        return self.meter.ledger

    # -- a call starts and ends --------------------------------------------------------------------
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        sent = list(messages[0]) if messages else []
        with self._lock:
            if len(self._started) >= _KEPT:
                self._started.clear()
            self._started[run_id] = _Started(sent, dict(metadata or {}), time.perf_counter(), parent_run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._started.pop(run_id, None)  # not paid: nothing to record

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        with self._lock:
            started = self._started.pop(run_id, None)
        if started is None:
            return  # not a chat model call (a text LLM), or one started before this recorder
        events = [e for e in (self._event(started, g, run_id, response) for g in _replies(response)) if e]
        if parent_run_id is None:
            self._record(events)  # a model invoked on its own: no run to wait for
            return
        with self._lock:
            if len(self._ended) >= _KEPT:
                self._ended.clear()
            self._ended.setdefault(parent_run_id, []).extend(events)

    # -- the run that made it ends: the calls are written -------------------------------------------
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._flush(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._flush(run_id)  # a node that failed (or paused) after its call: the call was paid

    def _flush(self, run_id: UUID) -> None:
        with self._lock:
            events = self._ended.pop(run_id, None)
        if events:
            self._record(events)

    def _record(self, events: Sequence[UsageEvent]) -> None:
        for event in events:
            try:
                self.ledger.record(event)
            except RememError as exc:
                log.warning("the usage of a model call could not be recorded (%s); the reply was kept", exc)

    def _event(
        self, started: _Started, reply: BaseMessage, run_id: UUID, response: LLMResult
    ) -> UsageEvent | None:
        meta = started.metadata
        thread = meta.get("thread_id")
        thread_id = None if thread is None else str(thread)
        user = meta.get("user_id", self.user_id)
        reply_id = getattr(reply, "id", None) or f"run-{run_id}"
        model = _model_name(reply, response, meta)
        try:
            return self.meter.reply_event(
                "chat",
                model,
                started.sent,
                reply,
                started=started.started,
                thread_id=thread_id,
                user_id=None if user is None else str(user),
                node=_text_or_none(meta.get("langgraph_node")),
                call_id=call_id_of(thread_id, reply_id) or f"-:{reply_id}",
            )
        except RememError as exc:
            log.warning("the usage of a model call could not be read (%s); it is not recorded", exc)
            return None


def _replies(response: LLMResult) -> list[BaseMessage]:
    return [
        message
        for generations in response.generations
        for generation in generations
        if isinstance(message := getattr(generation, "message", None), BaseMessage)
    ]


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _model_name(reply: BaseMessage, response: LLMResult, metadata: dict[str, Any]) -> str:
    """The model's name as the provider reported it, else as LangChain traced it."""
    for where in (reply.response_metadata, response.llm_output or {}, metadata):
        for key in ("model_name", "model", "ls_model_name"):
            name = where.get(key) if isinstance(where, dict) else None
            if isinstance(name, str) and name:
                return name
    return "unknown"
