"""The seeds' memory-managed agent: ``call_model``, then compaction when the strategy asks for it.

State = messages + rolling summary + a usage ledger. Each turn:

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

:func:`run_turn` holds the thread's lease for the whole turn (``remem._lease``): one writer per thread,
across threads and processes, so two turns never fork the thread's history.
"""

from __future__ import annotations

import operator
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.base import BaseStore

from remem._clock import now_iso
from remem._lease import DEFAULT_LEASE_TIMEOUT, athread_lease, thread_lease
from remem.config import Settings, load_settings
from remem.errors import BudgetExceededError, ConfigError, InvalidMessagesError, ModelError, RememError
from remem.messages import (
    DEFAULT_MAX_MESSAGE_CHARS,
    TokenCounter,
    check_can_append,
    check_provider_valid,
    coerce_messages,
    history_problems,
)
from remem.messages import token_counter as counter_named
from remem.models import check_chat_model, model_name
from remem.strategies import Plan, Strategy, build_view, strategy_from_name
from remem.summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer

__all__ = ["MemoryState", "UsageRecord", "arun_turn", "build_agent", "run_turn", "thread_config"]


class UsageRecord(TypedDict):
    """One model call: which turn and node it served, what it cost, how long it took."""

    turn: int
    node: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    at: str


class MemoryState(TypedDict, total=False):
    """The agent's state: the messages, the rolling summary, and every model call's usage."""

    messages: Annotated[list[AnyMessage], add_messages]
    summary: str
    usage: Annotated[list[UsageRecord], operator.add]


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _turn_of(usage: Sequence[UsageRecord]) -> int:
    """The turn of the latest model call (0 before the first)."""
    return max((record["turn"] for record in usage if record["node"] == "call_model"), default=0)


def _call_turn(usage: Sequence[UsageRecord], messages: Sequence[BaseMessage]) -> int:
    """The turn a model call serves: a call answering tool results goes on with the current turn."""
    turn = _turn_of(usage)
    return turn if turn and messages and isinstance(messages[-1], ToolMessage) else turn + 1


class _Nodes:
    """The graph's nodes, closed over the agent's parts."""

    def __init__(
        self,
        model: Runnable[Any, Any],
        strategy: Strategy,
        summarizer: Summarizer,
        count: TokenCounter,
        system_prompt: str | None,
        turn_budget: int,
        session_budget: int,
    ) -> None:
        self.model, self.strategy, self.summarizer, self.count = model, strategy, summarizer, count
        self.system_prompt, self.turn_budget, self.session_budget = system_prompt, turn_budget, session_budget

    def view(self, state: MemoryState) -> list[BaseMessage]:
        """Exactly what the model is sent for this state."""
        summary = state.get("summary", "")
        plan = self.strategy.view_plan(state.get("messages", []), summary)
        head: list[BaseMessage] = [SystemMessage(content=self.system_prompt)] if self.system_prompt else []
        return [*head, *build_view(plan, summary)]

    def check_budgets(self, view: list[BaseMessage], usage: Sequence[UsageRecord]) -> int | None:
        """The view's token count, counted only when a budget needs it (None when none is set)."""
        if not (self.turn_budget or self.session_budget):
            return None
        tokens = self.count(view)
        if self.turn_budget and tokens > self.turn_budget:
            raise BudgetExceededError(
                f"this turn would send {tokens} tokens, over the turn budget of {self.turn_budget} "
                "(REMEM_TURN_TOKEN_BUDGET); use the trim or summary strategy, or raise the budget"
            )
        spent = sum(r["input_tokens"] + r["output_tokens"] for r in usage)
        if self.session_budget and spent + tokens > self.session_budget:
            raise BudgetExceededError(
                f"this thread has spent {spent} tokens and this turn needs {tokens} more, over the "
                f"session budget of {self.session_budget} (REMEM_SESSION_TOKEN_BUDGET); "
                "start a new thread or raise the budget"
            )
        return tokens

    def call_model(self, state: MemoryState) -> dict[str, Any]:
        view = self.view(state)
        check_provider_valid(view)
        usage = state.get("usage", [])
        tokens = self.check_budgets(view, usage)
        started = time.perf_counter()
        try:
            reply = self.model.invoke(view)
        except RememError:
            raise
        except Exception as exc:
            raise ModelError(
                f"the chat model call failed ({type(exc).__name__}: {exc}); your message is kept in the "
                "thread: invoke again (or send the next message) to retry"
            ) from exc
        latency = (time.perf_counter() - started) * 1000
        meta = getattr(reply, "usage_metadata", None) or {}
        record = UsageRecord(
            turn=_call_turn(usage, state.get("messages", [])),
            node="call_model",
            model=model_name(self.model),
            input_tokens=int(meta.get("input_tokens") or (self.count(view) if tokens is None else tokens)),
            output_tokens=int(meta.get("output_tokens") or self.count([reply])),
            latency_ms=round(latency, 2),
            at=now_iso(),
        )
        return {"messages": [reply], "usage": [record]}

    def route(self, state: MemoryState) -> str:
        plan = self.strategy.compaction_plan(state.get("messages", []), state.get("summary", ""))
        if plan is None:
            return END
        return "summarize_conversation" if plan.summarize else "delete_messages"

    def compact(self, state: MemoryState) -> dict[str, Any]:
        summary = state.get("summary", "")
        plan = self.strategy.compaction_plan(state.get("messages", []), summary)
        if plan is None:
            return {}
        update: dict[str, Any] = {"messages": _removals(plan)}
        if plan.summarize:
            result = self.summarizer.summarize(summary, plan.summarize)
            update["summary"] = result.text
            if result.input_tokens:
                update["usage"] = [
                    UsageRecord(
                        turn=_turn_of(state.get("usage", [])),
                        node="summarize_conversation",
                        model=result.model,
                        input_tokens=result.input_tokens,
                        output_tokens=result.output_tokens,
                        latency_ms=round(result.latency_ms, 2),
                        at=now_iso(),
                    )
                ]
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
    """
    s = settings or load_settings()
    chat = check_chat_model(model, s)
    chosen = strategy_from_name(strategy or s.strategy, s) if isinstance(strategy, str | None) else strategy
    if summarizer == "llm":
        summarize: Summarizer = LLMSummarizer(chat, max_tokens=s.summary_max_tokens)
    elif summarizer == "extractive":
        summarize = ExtractiveSummarizer(max_tokens=s.summary_max_tokens)
    elif isinstance(summarizer, str):
        raise ConfigError(f"unknown summarizer {summarizer!r}; use 'llm', 'extractive' or a Summarizer")
    else:
        summarize = summarizer
    tool_node = _tool_node(tools) if tools else None
    caller = _bind_tools(chat, tool_node) if tool_node else chat
    count = token_counter or counter_named(s.token_counter)
    nodes = _Nodes(
        caller, chosen, summarize, count, system_prompt, s.turn_token_budget, s.session_token_budget
    )
    graph = StateGraph(MemoryState)
    graph.add_node("call_model", nodes.call_model)
    graph.add_node("summarize_conversation", nodes.compact)
    graph.add_node("delete_messages", nodes.compact)
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
    _TURN_RULES[compiled] = _TurnRules(s.thread_lease_timeout, nodes)
    return compiled


@dataclass(frozen=True)
class _TurnRules:
    """What :func:`run_turn` knows of a graph :func:`build_agent` made: its lease wait, its model node."""

    lease_timeout: float
    nodes: _Nodes | None = None


_TURN_RULES: weakref.WeakKeyDictionary[Any, _TurnRules] = weakref.WeakKeyDictionary()


def _rules(graph: CompiledStateGraph[Any, Any, Any, Any], lease_timeout: float | None) -> _TurnRules:
    known = _TURN_RULES.get(graph, _TurnRules(DEFAULT_LEASE_TIMEOUT))
    return known if lease_timeout is None else _TurnRules(lease_timeout, known.nodes)


def _lease_owner(graph: CompiledStateGraph[Any, Any, Any, Any]) -> Any:
    """What holds the thread's lease: the checkpointer's database (the graph itself when it has none)."""
    saver = graph.checkpointer
    return saver if isinstance(saver, BaseCheckpointSaver) else graph


def _unfinished(snapshot: Any) -> bool:
    """Whether the thread's last checkpoint has tasks left: a turn cut short after its input, or after a
    node's writes (the model's reply) were saved but before the step's checkpoint. Resuming with ``None``
    applies the saved writes instead of running their nodes again."""
    return bool(snapshot.next or snapshot.tasks)


def _check_input(rules: _TurnRules, values: dict[str, Any], messages: list[BaseMessage]) -> None:
    """Refuse, before anything is written, an input the turn would refuse after writing it."""
    history = values.get("messages", [])
    check_can_append(history, messages)
    merged = cast("list[AnyMessage]", add_messages(cast(Any, list(history)), cast(Any, list(messages))))
    problems = history_problems(merged)
    if problems and not history_problems(history):
        raise InvalidMessagesError(
            "this turn would send the model a history that is not provider-valid: "
            + "; ".join(problems[:3])
            + ". An AI tool call needs its results (ToolMessages) before the model is called again; "
            "the thread was not changed"
        )
    if rules.nodes is not None:  # the budgets call_model checks, checked before the input is stored
        state = MemoryState(messages=merged, summary=values.get("summary", ""), usage=values.get("usage", []))
        rules.nodes.check_budgets(rules.nodes.view(state), state["usage"])


def run_turn(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    message: Any,
    *,
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
    lease_timeout: float | None = None,
) -> AIMessage:
    """Send one user turn and return the reply.

    The turn holds the thread's lease: another turn on the same thread, in this process or another,
    waits for it up to ``lease_timeout`` seconds (default: the ``thread_lease_timeout`` setting the agent
    was built with) and then raises :class:`~remem.errors.ThreadBusyError`, having written nothing.
    A turn that an earlier failure or crash left unfinished is completed first, from what it wrote, so
    a reply that was saved is kept and no model call is paid for twice. The input is then checked
    against the thread (shape, provider validity, token budgets) before any of it is written: a refused
    input leaves the thread as it was.
    """
    messages = coerce_messages(message, max_chars=max_message_chars)
    config = thread_config(thread_id)
    rules = _rules(graph, lease_timeout)
    with thread_lease(_lease_owner(graph), thread_id, scope="checkpoint", timeout=rules.lease_timeout):
        snapshot = graph.get_state(config)
        if _unfinished(snapshot):
            graph.invoke(None, config)
            snapshot = graph.get_state(config)
        _check_input(rules, snapshot.values, messages)
        result = graph.invoke({"messages": messages}, config)
    return _last_reply(result)


async def arun_turn(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    message: Any,
    *,
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
    lease_timeout: float | None = None,
) -> AIMessage:
    """Async version of :func:`run_turn`."""
    messages = coerce_messages(message, max_chars=max_message_chars)
    config = thread_config(thread_id)
    rules = _rules(graph, lease_timeout)
    async with athread_lease(_lease_owner(graph), thread_id, scope="checkpoint", timeout=rules.lease_timeout):
        snapshot = await graph.aget_state(config)
        if _unfinished(snapshot):
            await graph.ainvoke(None, config)
            snapshot = await graph.aget_state(config)
        _check_input(rules, snapshot.values, messages)
        result = await graph.ainvoke({"messages": messages}, config)
    return _last_reply(result)


def _last_reply(result: dict[str, Any]) -> AIMessage:
    for message in reversed(result.get("messages", [])):
        if isinstance(message, AIMessage):
            return message
    raise ModelError("the graph finished without a reply from the model")  # pragma: no cover
