"""The seeds' memory-managed agent: ``call_model``, then compaction when the strategy asks for it.

State = messages + rolling summary + the turn number; every model call goes to the usage ledger. Each turn:

    START -> call_model -> (tool calls?) -> tools -> call_model ...
                        \\-> (strategy compacts?) -> summarize_conversation | delete_messages -> END
                                                \\-> END

With ``tools``, the model's tool calls run in the ``tools`` node and the loop goes back to ``call_model``
(LangGraph's ``tools_condition``); every call of the loop is sent the strategy's view, and compaction waits
until the turn ends with a reply that calls no tool.

``call_model`` sends the strategy's view (always provider-valid) and records tokens and latency next to
the turn. If compaction fails after the model replied, the reply is already checkpointed: invoking the
graph again with ``None`` resumes at the compaction step without calling the chat model again
(:func:`run_turn` does that for you).

:func:`run_turn` (in :mod:`remem._turn`, exported here) holds the thread's lease for the whole turn
(``remem._lease``): one writer per thread, across threads and processes, so two turns never fork the
thread's history. This module builds the graph and its nodes; a turn's driving lives in ``_turn``.

Above ``approval_token_threshold`` / ``approval_cost_threshold`` a model call pauses before it is sent
(:mod:`remem.usage._approval`, the same interrupt as ``BudgetMiddleware``'s): :func:`run_turn` raises
:class:`~remem.errors.ApprovalPendingError`, :func:`resume_turn` answers it; a refusal ends the turn with a
message and no compaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph._internal._runnable import RunnableCallable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.base import BaseStore

from remem._turn import (
    SUMMARY_ERROR_KEY,
    TURN_RULES_ATTRIBUTE,
    TurnRules,
    aresume_turn,
    arun_turn,
    resume_turn,
    rules_of,
    run_turn,
    thread_config,
)
from remem.config import Settings, load_settings
from remem.errors import ConfigError, ModelError, RememError
from remem.messages import (
    TokenCounter,
    approximate_token_count,
    check_provider_valid,
    is_refusal,
    retried_copy,
    tool_schema_text,
    without_refusals,
)
from remem.messages import token_counter as counter_named
from remem.models import check_chat_model, model_name
from remem.strategies import Plan, Strategy, build_view, strategy_from_name
from remem.summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer
from remem.usage import (
    BUDGETS_KEY,
    Budgets,
    LazyLedger,
    Ledger,
    PriceTable,
    UsageEvent,
    ledger_for,
    ledger_from_url,
)
from remem.usage._gate import Call, Gate
from remem.usage._pending import UNRECORDED
from remem.usage._prefix import PrefixCounter
from remem.usage._records import call_id_of

__all__ = [
    "SUMMARY_ERROR_KEY",
    "TURN_RULES_ATTRIBUTE",
    "MemoryState",
    "TurnRules",
    "UsageRecord",
    "aresume_turn",
    "arun_turn",
    "build_agent",
    "ledger_of",
    "resume_turn",
    "run_turn",
    "thread_config",
]

log = logging.getLogger("remem.agent")


class UsageRecord(TypedDict):
    """One model call as checkpoints written before the usage ledger kept it (``MemoryState.usage``)."""

    turn: int
    node: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    at: str


class MemoryState(TypedDict, total=False):
    """The agent's state: the messages, the rolling summary and the turn number (one integer).

    Every model call goes to the usage ledger (``remem.usage``) of the thread's database, not into the
    state. ``usage`` is only read: the list that checkpoints written before the ledger carry. The thread's
    next model call copies it into the ledger (once: each record has a call id) and empties it.
    ``remem_unrecorded`` holds the paid calls whose ledger write failed, stored with their replies, until
    the thread's next model call writes them (:mod:`remem.usage._pending`); normally it is absent.
    """

    messages: Annotated[list[AnyMessage], add_messages]
    summary: str
    remem_turn: int
    usage: list[UsageRecord]
    remem_unrecorded: list[dict[str, Any]]


def _legacy_turn(usage: Sequence[UsageRecord]) -> int:
    """The turn of the latest model call in a legacy ``usage`` list (0 before the first)."""
    return max((int(r.get("turn") or 0) for r in usage if r.get("node") == "call_model"), default=0)


def _turn_before(state: Mapping[str, Any]) -> int:
    """The thread's turn number so far: the state's integer, or, in a legacy checkpoint, its usage list's."""
    turn = state.get("remem_turn")
    return turn if isinstance(turn, int) else _legacy_turn(state.get("usage") or [])


def _call_turn(state: Mapping[str, Any]) -> int:
    """The turn a model call serves: a call answering tool results goes on with the current turn."""
    turn = _turn_before(state)
    messages = state.get("messages") or []
    return turn if turn and messages and isinstance(messages[-1], ToolMessage) else turn + 1


@dataclass(frozen=True)
class _Caller:
    """Who a call is made for, and the budgets given for the run: from the run's ``configurable``
    (``thread_id``, ``user_id``, ``remem_budgets``)."""

    thread_id: str | None = None
    user_id: str | None = None
    budgets: Any = None

    @classmethod
    def of(cls, config: RunnableConfig | None) -> _Caller:
        conf = (config or {}).get("configurable") or {}
        thread, user = conf.get("thread_id"), conf.get("user_id")
        return cls(
            None if thread is None else str(thread),
            None if user is None else str(user),
            conf.get(BUDGETS_KEY),
        )


def _epoch(at: Any) -> float:
    try:
        return datetime.fromisoformat(str(at)).timestamp()
    except ValueError:
        return time.time()


class _Nodes:
    """The graph's nodes, closed over the agent's parts.

    Every model call passes the agent's :class:`~remem.usage._gate.Gate`, the one ``BudgetMiddleware``
    drives too: budgets checked before the call from a counted estimate (the view, system prompt
    included, plus the tool schemas, counted once), approval, the breach action, and the ledger row after
    it (see :mod:`remem.usage._gate` for the rules both paths keep).
    """

    def __init__(
        self,
        model: Runnable[Any, Any],
        strategy: Strategy,
        summarizer: Summarizer,
        count: TokenCounter,
        system_prompt: str | None,
        gate: Gate,
        tool_tokens: int = 0,
    ) -> None:
        self.model, self.strategy, self.summarizer, self.count = model, strategy, summarizer, count
        # The view is counted once per thread: each call counts the messages added since the last one.
        self._prefix = PrefixCounter(count) if count is approximate_token_count else None
        self.system_prompt, self.gate, self.tool_tokens = system_prompt, gate, tool_tokens
        self.model_name = model_name(model)

    @property
    def ledger(self) -> Ledger | None:
        return self.gate.ledger

    def view(self, state: Mapping[str, Any]) -> list[BaseMessage]:
        """Exactly what the model is sent for this state."""
        summary = state.get("summary", "")
        plan = self.strategy.view_plan(state.get("messages", []), summary)
        head: list[BaseMessage] = [SystemMessage(content=self.system_prompt)] if self.system_prompt else []
        return [*head, *without_refusals(build_view(plan, summary))]

    def tokens(self, view: Sequence[BaseMessage], caller: _Caller) -> int:
        """The counted input of a call that sends ``view``: the view and the tool schemas."""
        if self._prefix is not None and caller.thread_id is not None:
            return self._prefix(caller.thread_id, view) + self.tool_tokens
        return self.count(view) + self.tool_tokens

    def call(self, view: list[BaseMessage], caller: _Caller, turn: int) -> Call:
        """The gate's view of the call that sends ``view`` (the tool schemas are its head)."""
        return Call(
            self.model_name,
            view,
            lambda messages: self.tokens(messages, caller),
            self.count,
            head=self.tool_tokens,
            thread_id=caller.thread_id,
            user_id=caller.user_id,
            turn=turn,
            run_budgets=caller.budgets,
        )

    def precheck(
        self, values: Mapping[str, Any], messages: list[BaseMessage], config: RunnableConfig
    ) -> None:
        """The gate's check of the turn's first call before its input is stored (run_turn: the state
        ``values`` with the input ``messages`` added); the call then reuses its count and reads, since the
        thread's lease keeps anything else of the thread from spending or writing. A legacy usage list,
        and the rows a failed ledger write left, are written to the ledger first (the state is emptied
        by the call)."""
        caller = _Caller.of(config)
        merged = cast(
            "list[AnyMessage]",
            add_messages(cast(Any, list(values.get("messages", []))), cast(Any, list(messages))),
        )
        state = {**values, "messages": merged}
        self.adopt_legacy(state, caller)
        self.gate.flush(state)
        if not self.gate.budgets_for(caller.budgets).active:
            return  # nothing to check: the view is not even built
        self.gate.precheck(self.call(self.view(state), caller, _call_turn(state)))

    def adopt_legacy(self, state: Mapping[str, Any], caller: _Caller) -> dict[str, Any]:
        """Copy a legacy checkpoint's ``usage`` list into the ledger (idempotent) and empty it."""
        legacy = state.get("usage")
        if not legacy:
            return {}
        meter = self.gate.recording
        if meter is not None and caller.thread_id is not None:
            for n, record in enumerate(legacy):
                node = str(record.get("node") or "call_model")
                event = meter.event(
                    "chat" if node == "call_model" else "summariser",
                    str(record.get("model") or "unknown"),
                    input_tokens=int(record.get("input_tokens") or 0),
                    output_tokens=int(record.get("output_tokens") or 0),
                    source="counted",
                    thread_id=caller.thread_id,
                    user_id=caller.user_id,
                    turn=int(record.get("turn") or 0),
                    node=node,
                    latency_ms=record.get("latency_ms"),
                    call_id=f"{caller.thread_id}:legacy:{n}",
                )
                meter.ledger.record(dataclasses.replace(event, at=_epoch(record.get("at"))))
        return {"usage": [], "remem_turn": _turn_before(state)}

    def _record(self, event: UsageEvent, state: Mapping[str, Any], update: dict[str, Any]) -> None:
        """Record a paid call; a ledger that refuses it keeps the row in ``update``, with the reply."""
        kept = self.gate.keep(event)
        if kept:
            earlier = update.get(UNRECORDED, state.get(UNRECORDED) or [])
            update[UNRECORDED] = [*earlier, *kept]

    async def _afind_ledger(self) -> None:
        # An aiosqlite saver's file can only be asked from async code: asked here, before a sync step opens
        # the ledger, so that the ledger is in the saver's own database (ledger_for's prepare step).
        ledger = self.ledger
        if isinstance(ledger, LazyLedger):
            await ledger.aprepare()

    async def acall_model(self, state: MemoryState, config: RunnableConfig) -> dict[str, Any]:
        """Async version of :meth:`call_model`."""
        await self._afind_ledger()
        return await asyncio.to_thread(self.call_model, state, config)

    async def acompact(self, state: MemoryState, config: RunnableConfig) -> dict[str, Any]:
        """Async version of :meth:`compact`."""
        await self._afind_ledger()
        return await asyncio.to_thread(self.compact, state, config)

    def call_model(self, state: MemoryState, config: RunnableConfig) -> dict[str, Any]:
        caller = _Caller.of(config)
        copy = retried_copy(state.get("messages") or [])
        if copy is not None:  # the same message sent again after a failure: the kept turn is answered once
            state = cast("MemoryState", {**state, "messages": state["messages"][:-1]})
        dropped: list[BaseMessage] = [] if copy is None else [RemoveMessage(id=str(copy.id))]
        view = self.view(state)
        check_provider_valid(view)
        turn = _call_turn(state)
        update = self.adopt_legacy(state, caller)
        decision = self.gate.before(self.call(view, caller, turn), state)
        if decision.flushed:
            update[UNRECORDED] = []
        if turn != state.get("remem_turn"):
            update["remem_turn"] = turn
        if decision.not_sent is not None:  # nothing is sent: the turn ends with a message saying so
            update["messages"] = [*dropped, decision.not_sent]
            return update
        sent = list(decision.messages)
        started = time.perf_counter()
        try:
            reply = self.model.invoke(sent)
        except BaseException as exc:
            self.gate.release(decision)  # not paid: what it held of the budgets is free again
            if isinstance(exc, RememError) or not isinstance(exc, Exception):
                raise
            raise ModelError(
                f"the chat model call failed ({type(exc).__name__}: {exc}); your message is kept in the "
                "thread: send the same message again to retry (the kept turn is answered, not a copy), or the "
                "next message"
            ) from exc
        update["messages"] = [*dropped, reply]
        if self.gate.recording is not None:
            try:
                event = self.gate.event(decision, reply, sent=sent, started=started, node="call_model")
                kept = self.gate.after(decision, event)
            except BaseException:
                self.gate.release(decision)  # as BudgetMiddleware does: no hold outlives a failed turn
                raise
            if kept:
                update[UNRECORDED] = [*update.get(UNRECORDED, state.get(UNRECORDED) or []), *kept]
        return update

    def route(self, state: MemoryState) -> str:
        messages = state.get("messages") or []
        if messages and is_refusal(messages[-1]):  # a refused call ends the turn: no compaction either
            return END
        plan = self.strategy.compaction_plan(state.get("messages", []), state.get("summary", ""))
        if plan is None:
            return END
        return "summarize_conversation" if plan.summarize else "delete_messages"

    def compact(self, state: MemoryState, config: RunnableConfig) -> dict[str, Any]:
        summary = state.get("summary", "")
        plan = self.strategy.compaction_plan(state.get("messages", []), summary)
        if plan is None:
            return {}
        update: dict[str, Any] = {"messages": _removals(plan)}
        if plan.summarize:
            result = self.summarizer.summarize(summary, plan.summarize)
            update["summary"] = result.text
            if (
                result.input_tokens and self.gate.recording is not None
            ):  # the extractive summariser calls no model
                caller = _Caller.of(config)
                source = result.extra.get("source")
                self._record(
                    self.gate.recording.event(
                        "summariser",
                        result.model,
                        input_tokens=result.input_tokens,
                        output_tokens=result.output_tokens,
                        source="counted" if source == "counted" else "provider",
                        thread_id=caller.thread_id,
                        user_id=caller.user_id,
                        turn=_turn_before(state),
                        node="summarize_conversation",
                        latency_ms=result.latency_ms,
                        call_id=call_id_of(caller.thread_id, result.extra.get("reply_id")),
                    ),
                    state,
                    update,
                )
        return update


def _removals(plan: Plan) -> list[BaseMessage]:
    """The update that removes ``plan.remove`` from the state: one removal per message, or, when fewer
    messages stay than go, "remove all" and the ones that stay (same state, a write the size of the tail)."""
    gone = {str(m.id) for m in plan.remove}
    kept = [m for m in (*plan.system, *plan.dropped, *plan.kept) if str(m.id) not in gone]
    if len(kept) < len(gone):
        return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]
    return [RemoveMessage(id=str(m.id)) for m in plan.remove]


Tools = Sequence[BaseTool | Callable[..., Any]] | ToolNode


def _tool_node(tools: Tools) -> ToolNode:
    if isinstance(tools, ToolNode):
        return tools
    # A tool that raises answers with its error, so the model can recover and every call keeps its result
    # (a call left without one would make the thread's history invalid for every provider).
    return ToolNode(list(tools), handle_tool_errors=True)


def _bind_tools(model: BaseChatModel, node: ToolNode) -> Runnable[Any, Any]:
    try:
        return model.bind_tools(list(node.tools_by_name.values()))
    except (NotImplementedError, AttributeError):  # BaseChatModel's default raises; a plain Runnable has none
        raise ConfigError(
            f"{type(model).__name__} cannot call tools (it has no bind_tools); pass a chat model that "
            "supports tool calling (e.g. ChatOpenAI), or build the agent without tools"
        ) from None


def _route_after_model(nodes: _Nodes) -> Callable[[MemoryState], str]:
    """LangGraph's ``tools_condition``, then the strategy's compaction once the turn has its reply."""

    def route(state: MemoryState) -> str:
        messages = state.get("messages", [])
        if messages and isinstance(messages[-1], AIMessage) and messages[-1].tool_calls:
            return "tools"
        return nodes.route(state)

    return route


def build_agent(
    model: BaseChatModel | None = None,
    *,
    tools: Tools | None = None,
    strategy: str | Strategy | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    store: BaseStore | None = None,
    summarizer: Summarizer | str = "llm",
    settings: Settings | None = None,
    system_prompt: str | None = None,
    token_counter: TokenCounter | None = None,
    ledger: Ledger | str | Path | bool = True,
    budgets: Budgets | None = None,
    approve_tokens: int | None = None,
    approve_cost: float | None = None,
    budget_action: str | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The seeds' complete template, compiled: messages + summary, ``call_model``, compaction, routing.

    ``model`` is any LangChain chat model; by default the one ``REMEM_LLM_*`` configures. Without one,
    :class:`~remem.errors.ConfigError` says what to set, before anything is written.
    ``tools`` (LangChain tools, plain functions or a ``ToolNode``) are bound to the model and run in a
    ``tools`` node, as in the seeds' agent with a tool. ``settings`` default to :func:`remem.load_settings`
    (``REMEM_*`` variables and ``remem.toml``), as the memory client reads them: they choose the strategy
    when ``strategy`` is not given, its sizes, the budgets and the token counter. ``strategy`` is a name
    (filter, delete, trim, summary) or a strategy object. ``summarizer`` is ``"llm"`` (the agent's model,
    as in the seeds), ``"extractive"`` (no model), or any :class:`~remem.summarize.Summarizer`.

    Every model call (the chat model's and the summariser's) is recorded in the usage ledger: by default
    the one in the checkpointer's own database (the same SQLite file or PostgreSQL database; this
    process's memory for ``InMemorySaver``), opened at the first call; or the :class:`~remem.usage.Ledger`
    or database URL given as ``ledger``; ``ledger=False`` records nothing. ``budgets`` (default: the
    settings', :meth:`~remem.usage.Budgets.from_settings`) are checked before each call against what the
    ledger says the turn, the thread and the user's UTC day spent (``run_turn(..., user_id=...)`` or
    ``configurable.user_id``), and what calls still running (in any process) hold of them, so processes
    sharing a budget cannot all pass it (:mod:`remem.usage._holds`); prices come from ``[remem.prices]``. :func:`ledger_of` gives the ledger.

    A model call whose counted estimate is above ``approve_tokens`` tokens or costs more than
    ``approve_cost`` (default: the settings' ``approval_token_threshold`` / ``approval_cost_threshold``;
    0: never) pauses before it is sent, as ``BudgetMiddleware`` does (:mod:`remem.usage._approval`):
    :func:`run_turn` raises :class:`~remem.errors.ApprovalPendingError` with the estimate, and
    :func:`resume_turn` answers (True sends the call; False ends the turn with a message saying it was not
    approved). A checkpointer is needed to pause. ``budget_action`` (default: the settings') is what a call
    that would pass a budget does: ``error`` (:class:`~remem.errors.BudgetExceededError`; ``run_turn``
    raises it before the input is stored), ``refuse``, ``approve`` or ``compact``
    (:mod:`remem.usage._breach`).
    """
    s = settings or load_settings()
    chat = check_chat_model(model, s)
    chosen = strategy_from_name(strategy or s.strategy, s) if isinstance(strategy, str | None) else strategy
    if summarizer == "llm":
        summarize: Summarizer = LLMSummarizer(
            chat, max_tokens=s.summary_max_tokens, instructions=s.summary_prompt
        )
    elif summarizer == "extractive":
        summarize = ExtractiveSummarizer(max_tokens=s.summary_max_tokens)
    elif isinstance(summarizer, str):
        raise ConfigError(f"unknown summarizer {summarizer!r}; use 'llm', 'extractive' or a Summarizer")
    else:
        summarize = summarizer
    tool_node = _tool_node(tools) if tools else None
    caller = _bind_tools(chat, tool_node) if tool_node else chat
    count = token_counter or counter_named(s.token_counter)
    chosen_ledger = _ledger(ledger, checkpointer)
    tool_text = tool_schema_text(list(tool_node.tools_by_name.values())) if tool_node else ""
    gate = Gate(
        chosen_ledger,
        budgets=budgets or Budgets.from_settings(s),
        prices=PriceTable.from_settings_rows(s.prices),
        count=count,
        approve_tokens=approve_tokens if approve_tokens is not None else s.approval_token_threshold,
        approve_cost=approve_cost if approve_cost is not None else s.approval_cost_threshold,
        budget_action=budget_action or s.budget_action,
    )
    nodes = _Nodes(
        caller,
        chosen,
        summarize,
        count,
        system_prompt,
        gate,
        count([SystemMessage(content=tool_text)]) if tool_text else 0,
    )
    graph = StateGraph(MemoryState)
    # Sync and async steps: an async run (ainvoke, arun_turn) finds the ledger of an async saver first.
    graph.add_node("call_model", RunnableCallable(nodes.call_model, nodes.acall_model, trace=False))
    compact = RunnableCallable(nodes.compact, nodes.acompact, trace=False)
    graph.add_node("summarize_conversation", compact)
    graph.add_node("delete_messages", compact)
    graph.add_edge(START, "call_model")
    after_model = ["summarize_conversation", "delete_messages", END]
    if tool_node is not None:
        graph.add_node("tools", tool_node)
        graph.add_edge("tools", "call_model")
        graph.add_conditional_edges("call_model", _route_after_model(nodes), ["tools", *after_model])
    else:
        graph.add_conditional_edges("call_model", nodes.route, after_model)
    graph.add_edge("summarize_conversation", END)
    graph.add_edge("delete_messages", END)
    compiled = graph.compile(checkpointer=checkpointer, store=store)
    compiled.name = f"remem-agent[{chosen.name}]"
    rules = TurnRules(
        s.thread_lease_timeout,
        nodes.precheck,
        nodes.ledger,
        nodes.gate.drop_precheck,
        nodes.gate.adrop_precheck,
    )
    setattr(compiled, TURN_RULES_ATTRIBUTE, rules)
    if chosen_ledger is not None and chosen_ledger is not ledger:  # opened here: closed with the graph
        weakref.finalize(compiled, chosen_ledger.close)
    return compiled


def _ledger(ledger: Ledger | str | Path | bool, checkpointer: Any) -> Ledger | None:
    if ledger is False:
        return None
    if ledger is True:
        return ledger_for(checkpointer)
    if isinstance(ledger, Ledger):
        return ledger
    url = ledger
    return LazyLedger(lambda: ledger_from_url(url))


def ledger_of(graph: CompiledStateGraph[Any, Any, Any, Any]) -> Ledger | None:
    """The usage ledger a graph :func:`build_agent` made records its model calls in (None: it records none)."""
    rules = rules_of(graph)
    return None if rules is None else rules.ledger
