"""A user turn on a graph, under the thread's lease: :func:`run_turn`, :func:`resume_turn` and their async
versions, the config of a turn (:func:`thread_config`) and the rules a graph carries for its turns
(:class:`TurnRules`, which :func:`remem.agent.build_agent` sets).

:func:`run_turn` holds the thread's lease for the whole turn (``remem._lease``): one writer per thread,
across threads and processes, so two turns never fork the thread's history. It first completes a turn
an earlier failure left unfinished, checks the input before writing any of it, and turns a pause for
approval into :class:`~remem.errors.ApprovalPendingError` (answered by :func:`resume_turn`). Every name
here is public from :mod:`remem.agent`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from remem._lease import DEFAULT_LEASE_TIMEOUT, LeaseTarget, athread_lease, carry_lease, thread_lease
from remem.checkpoint._targets import acheckpointer_lease_target, checkpointer_lease_target
from remem.errors import (
    ApprovalPendingError,
    ArgumentTypeError,
    InvalidMessagesError,
    ModelError,
    NotFoundError,
    RememError,
    StorageError,
    SummarizationError,
)
from remem.messages import (
    DEFAULT_MAX_MESSAGE_CHARS,
    coerce_messages,
    history_problems,
    is_retry,
    unanswered,
)
from remem.messages.history import appended_problems, refuse_append
from remem.usage import BUDGETS_KEY, Budgets, Ledger
from remem.usage._approval import pending_approval

if TYPE_CHECKING:
    from remem.middleware.budget import BudgetMiddleware

__all__ = [
    "SUMMARY_ERROR_KEY",
    "TURN_RULES_ATTRIBUTE",
    "TurnRules",
    "aresume_turn",
    "arun_turn",
    "resume_turn",
    "rules_of",
    "run_turn",
    "thread_config",
]

log = logging.getLogger("remem.agent")  # the agent's logger: a turn's warnings are the agent's


def thread_config(thread_id: str, user_id: str | None = None, budgets: Any = None) -> RunnableConfig:
    """A run's config: its thread, who its calls are for, and budgets for this run only (over the agent's:
    :meth:`~remem.usage.Budgets.merged`)."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if user_id is not None:
        configurable["user_id"] = user_id
    if budgets is not None:
        configurable[BUDGETS_KEY] = budgets
    return {"configurable": configurable}


TURN_RULES_ATTRIBUTE = "remem_turn_rules"  # the attribute of a graph that holds its TurnRules


@dataclass(frozen=True)
class TurnRules:
    """What :func:`run_turn` needs of a graph besides LangGraph's API, carried by the graph itself (its
    attribute ``remem_turn_rules``; :func:`build_agent` sets it): how long a turn waits for the thread's
    lease, the budget check made before a turn's input is stored (``precheck(values, messages, config)``:
    raise to refuse the input, having written nothing), and the ledger its calls go to.

    A ``create_agent`` graph with ``BudgetMiddleware`` gets the middleware's check by passing the
    middleware to :func:`run_turn` (``gate=budget``).
    """

    lease_timeout: float = DEFAULT_LEASE_TIMEOUT
    precheck: Callable[[Mapping[str, Any], list[BaseMessage], RunnableConfig], None] | None = None
    ledger: Ledger | None = None
    drop_precheck: Callable[[str], None] | None = None
    """Called with the thread id once the turn ended, however it ended: a hold the precheck took and no
    model call took is released (:meth:`remem.usage.Gate.drop_precheck`)."""
    adrop_precheck: Callable[[str], Awaitable[None]] | None = None
    """Async version of ``drop_precheck`` (:func:`arun_turn` awaits it; None: ``drop_precheck`` is called)."""


def rules_of(graph: Any) -> TurnRules | None:
    rules = getattr(graph, TURN_RULES_ATTRIBUTE, None)
    return rules if isinstance(rules, TurnRules) else None


def _turn_rules(graph: Any, gate: BudgetMiddleware | None, lease_timeout: float | None) -> TurnRules:
    """The graph's own rules, with ``gate``'s check and ``lease_timeout`` over them when given."""
    rules = rules_of(graph) or TurnRules()
    if gate is not None:
        from remem.middleware.budget import BudgetMiddleware

        if not isinstance(gate, BudgetMiddleware):  # pragma: no cover - typed
            raise ArgumentTypeError(
                f"gate is the BudgetMiddleware the graph was built with; got {type(gate).__name__}"
            )
        rules = dataclasses.replace(rules, precheck=gate.precheck, ledger=gate.ledger)
    if lease_timeout is not None:
        rules = dataclasses.replace(rules, lease_timeout=lease_timeout)
    return rules


def _lease_target(graph: CompiledStateGraph[Any, Any, Any, Any]) -> LeaseTarget:
    """Where the thread's lease is held: the checkpointer's database (this process when it has none)."""
    saver = graph.checkpointer
    return (
        checkpointer_lease_target(saver)
        if isinstance(saver, BaseCheckpointSaver)
        else LeaseTarget.in_process(graph)
    )


async def _alease_target(graph: CompiledStateGraph[Any, Any, Any, Any]) -> LeaseTarget:
    """Async version of :func:`_lease_target` (an ``aiosqlite`` saver's file is read from async code)."""
    saver = graph.checkpointer
    if isinstance(saver, BaseCheckpointSaver):
        return await acheckpointer_lease_target(saver)
    return LeaseTarget.in_process(graph)


def _unfinished(snapshot: Any) -> bool:
    """Whether the thread's last checkpoint has tasks left: a turn cut short after its input, or after a
    node's writes (the model's reply) were saved but before the step's checkpoint. Resuming with ``None``
    applies the saved writes instead of running their nodes again."""
    return bool(snapshot.next or snapshot.tasks)


def _check_input(
    rules: TurnRules, values: dict[str, Any], messages: list[BaseMessage], config: RunnableConfig
) -> None:
    """Refuse, before anything is written, an input the turn would refuse after writing it."""
    history = values.get("messages", [])
    # Merged and scanned once (a long thread's history is the whole of this check's work).
    _, pending, problems = appended_problems(history, messages)
    refuse_append(history, pending)
    if problems and not history_problems(history):
        raise InvalidMessagesError(
            "this turn would send the model a history that is not provider-valid: "
            + "; ".join(problems[:3])
            + ". An AI tool call needs its results (ToolMessages) before the model is called again; "
            "the thread was not changed"
        )
    if rules.precheck is not None:  # the budgets the model call checks, checked before the input is stored
        rules.precheck(values, messages, config)


def run_turn(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    message: Any,
    *,
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
    lease_timeout: float | None = None,
    user_id: str | None = None,
    budgets: Budgets | Mapping[str, float] | None = None,
    gate: BudgetMiddleware | None = None,
) -> AIMessage:
    """Send one user turn and return the reply.

    The turn holds the thread's lease: another turn on the same thread, in this process or another,
    waits for it up to ``lease_timeout`` seconds (default: the ``thread_lease_timeout`` setting the agent
    was built with) and then raises :class:`~remem.errors.ThreadBusyError`, having written nothing.
    A turn that an earlier failure or crash left unfinished is completed first, from what it wrote, so
    a reply that was saved is kept and no model call is paid for twice. The input is then checked
    against the thread (shape, provider validity, token budgets) before any of it is written: a refused
    input leaves the thread as it was. ``user_id`` is who the turn's model calls are recorded for (and
    whose daily budget they count against). ``budgets`` apply to this turn only, over the agent's
    (``Budgets(turn_cost=0.05)`` or ``{"turn_cost": 0.05}``; :meth:`~remem.usage.Budgets.merged`).
    """
    messages = coerce_messages(message, max_chars=max_message_chars)
    config = thread_config(thread_id, user_id, budgets)
    rules = _turn_rules(graph, gate, lease_timeout)
    with thread_lease(
        _lease_target(graph), thread_id, scope="checkpoint", timeout=rules.lease_timeout
    ) as lease:
        config = carry_lease(config, lease)  # the saver writes under the turn's lease
        snapshot = graph.get_state(config)
        _check_waiting(snapshot)
        if _unfinished(snapshot):
            retry = is_retry(snapshot.values.get("messages", []), messages)
            try:
                done = graph.invoke(None, config)
            except SummarizationError as exc:  # the kept turn's summary failed again: the turn goes on
                done = _drop_compaction(
                    graph.get_state(config), exc, lambda: graph.update_state(config, None, END)
                )
            _check_paused(done, lambda: graph.get_state(config))
            if retry:  # the same message again: the kept turn's reply is its answer, no copy is added
                return _last_reply(done)
            snapshot = graph.get_state(config)
        _check_input(rules, snapshot.values, messages, config)  # raising, it holds nothing
        try:
            result = graph.invoke({"messages": messages}, config)
        except SummarizationError as exc:
            return _reply_despite(graph.get_state(config), exc)
        except StorageError as exc:
            if type(exc) is not StorageError:
                raise
            raise _what_was_kept(exc, messages, lambda: graph.get_state(config)) from exc
        finally:
            if rules.drop_precheck is not None:
                rules.drop_precheck(thread_id)
        _check_paused(result, lambda: graph.get_state(config))
    return _last_reply(result)


def resume_turn(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    approved: bool,
    *,
    lease_timeout: float | None = None,
    user_id: str | None = None,
    budgets: Budgets | Mapping[str, float] | None = None,
    gate: BudgetMiddleware | None = None,
) -> AIMessage:
    """Answer the model call that waits for approval on the thread (:class:`~remem.errors.ApprovalPendingError`
    from :func:`run_turn`) and return the turn's reply.

    True sends the call (the turn goes on; a later call of the same turn above the threshold pauses again:
    ApprovalPendingError once more); False ends the turn with a message saying it was not approved, and
    nothing is sent. Every message is kept either way. ``user_id`` should be the one the turn was run with;
    the budgets the turn was given (``run_turn(..., budgets=...)``) are kept by its pause and apply again
    unless ``budgets`` are given.
    No call waiting raises :class:`~remem.errors.NotFoundError`, having written nothing.
    """
    config = thread_config(thread_id, user_id)
    rules = _turn_rules(graph, gate, lease_timeout)
    with thread_lease(
        _lease_target(graph), thread_id, scope="checkpoint", timeout=rules.lease_timeout
    ) as lease:
        config = thread_config(
            thread_id, user_id, _waiting_budgets(graph.get_state(config), thread_id, budgets)
        )
        config = carry_lease(config, lease)
        result = graph.invoke(Command(resume=approved is True), config)
        _check_paused(result, lambda: graph.get_state(config))
    return _last_reply(result)


async def arun_turn(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    message: Any,
    *,
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
    lease_timeout: float | None = None,
    user_id: str | None = None,
    budgets: Budgets | Mapping[str, float] | None = None,
    gate: BudgetMiddleware | None = None,
) -> AIMessage:
    """Async version of :func:`run_turn`."""
    messages = coerce_messages(message, max_chars=max_message_chars)
    config = thread_config(thread_id, user_id, budgets)
    rules = _turn_rules(graph, gate, lease_timeout)
    async with athread_lease(
        await _alease_target(graph), thread_id, scope="checkpoint", timeout=rules.lease_timeout
    ) as lease:
        config = carry_lease(config, lease)
        snapshot = await graph.aget_state(config)
        _check_waiting(snapshot)
        if _unfinished(snapshot):
            retry = is_retry(snapshot.values.get("messages", []), messages)
            try:
                done = await graph.ainvoke(None, config)
            except SummarizationError as exc:
                state = await graph.aget_state(config)
                await graph.aupdate_state(config, None, END)
                done = _drop_compaction(state, exc, lambda: None)
            snapshot = await graph.aget_state(config)
            _check_paused(done, lambda: snapshot)
            if retry:
                return _last_reply(done)
        await asyncio.to_thread(_check_input, rules, snapshot.values, messages, config)
        try:
            result = await graph.ainvoke({"messages": messages}, config)
        except SummarizationError as exc:
            return _reply_despite(await graph.aget_state(config), exc)
        except StorageError as exc:
            if type(exc) is not StorageError:
                raise
            try:
                snapshot = await graph.aget_state(config)
            except RememError:
                raise exc from None
            raise _what_was_kept(exc, messages, lambda: snapshot) from exc
        finally:
            if rules.adrop_precheck is not None:  # a dict entry, and I/O (off the loop) only for a hold
                await rules.adrop_precheck(thread_id)  # that no call took
            elif rules.drop_precheck is not None:
                rules.drop_precheck(thread_id)
        if _INTERRUPTS in result:
            _check_waiting(await graph.aget_state(config))
    return _last_reply(result)


async def aresume_turn(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    approved: bool,
    *,
    lease_timeout: float | None = None,
    user_id: str | None = None,
    budgets: Budgets | Mapping[str, float] | None = None,
    gate: BudgetMiddleware | None = None,
) -> AIMessage:
    """Async version of :func:`resume_turn`."""
    config = thread_config(thread_id, user_id)
    rules = _turn_rules(graph, gate, lease_timeout)
    async with athread_lease(
        await _alease_target(graph), thread_id, scope="checkpoint", timeout=rules.lease_timeout
    ) as lease:
        waiting = _waiting_budgets(await graph.aget_state(config), thread_id, budgets)
        config = carry_lease(thread_config(thread_id, user_id, waiting), lease)
        result = await graph.ainvoke(Command(resume=approved is True), config)
        if _INTERRUPTS in result:
            _check_waiting(await graph.aget_state(config))
    return _last_reply(result)


SUMMARY_ERROR_KEY = "remem_summary_error"  # in the returned reply's response_metadata: the failed summary


def _what_was_kept(exc: StorageError, messages: list[BaseMessage], read: Callable[[], Any]) -> StorageError:
    """The storage error of a turn (a full disk after the model call, say), saying whether the user's input
    was kept in the thread and what finishes the turn; the error as it was when the thread cannot be read."""
    try:
        history = read().values.get("messages", [])
    except RememError:
        return exc
    if is_retry(history, messages):
        note = (
            "your message was kept in the thread: send the same message again (once the database can "
            "write) to finish the turn; it is not stored twice"
        )
    elif [m.content for m in history[-len(messages) :]] == [m.content for m in messages]:
        note = "your messages were kept in the thread: the next run_turn on it finishes this turn first"
    else:
        note = "your message was not stored: send it again once the database can write"
    return StorageError(f"{exc}; {note}")


def _reply_despite(snapshot: Any, exc: SummarizationError) -> AIMessage:
    """The reply of a turn whose summary step failed after the model answered: returned (it was paid
    for), the error logged and attached (``response_metadata["remem_summary_error"]``); the summary step
    stays pending and the next turn runs it first. A failure before any reply raises."""
    messages = snapshot.values.get("messages", [])
    if not messages or unanswered(messages) is not None:
        raise exc
    log.warning(
        "the summary step after the reply failed (%s); the reply is kept and returned, and the next "
        "run_turn on the thread runs the summary again first (or invoke the graph with None)",
        exc,
    )
    reply = _last_reply(snapshot.values)
    return reply.model_copy(
        update={"response_metadata": {**reply.response_metadata, SUMMARY_ERROR_KEY: str(exc)}}
    )


def _drop_compaction(snapshot: Any, exc: SummarizationError, clear: Callable[[], Any]) -> dict[str, Any]:
    """A kept turn's summary failed again: its pending step is cleared (``clear``) so the next turn goes on
    (the strategy compacts again at its end); the state's values. A failure before any reply raises."""
    messages = snapshot.values.get("messages", [])
    if not messages or unanswered(messages) is not None:
        raise exc
    log.warning(
        "the summary step left by an earlier turn failed again (%s); it is skipped so that this turn goes "
        "on, and the strategy compacts at the end of this turn",
        exc,
    )
    clear()
    return cast("dict[str, Any]", snapshot.values)


_INTERRUPTS = "__interrupt__"  # the key of a paused run's interrupts in what invoke returns


def _approval_error(estimate: Mapping[str, Any]) -> ApprovalPendingError:
    cost = estimate.get("cost")
    spend = "unknown cost (no price)" if cost is None else f"a cost of about {cost:.6g}"
    return ApprovalPendingError(
        f"the next call to {estimate.get('model') or 'the model'} needs approval (about "
        f"{estimate.get('input_tokens', 0):,} input tokens, {spend}); nothing was sent. Answer with "
        "resume_turn(graph, thread_id, True) to send it or False to end the turn (remem chat asks yes/no)",
        estimate=estimate,
    )


def _check_waiting(snapshot: Any) -> None:
    """Raise ApprovalPendingError when a model call waits for approval in ``snapshot``."""
    estimate = pending_approval(snapshot)
    if estimate is not None:
        raise _approval_error(estimate)


def _check_paused(result: Any, snapshot: Callable[[], Any]) -> None:
    """Raise ApprovalPendingError when the run that returned ``result`` paused for an approval."""
    if isinstance(result, Mapping) and _INTERRUPTS in result:
        _check_waiting(snapshot())


def _waiting_budgets(snapshot: Any, thread_id: str, budgets: Any) -> Any:
    """The budgets to resume the call waiting on the thread with: ``budgets``, else the run's own that its
    pause kept (so that the answer goes to the same call: another budget might not ask at all)."""
    waiting = pending_approval(snapshot)
    if waiting is None:
        raise NotFoundError(
            f"no model call waits for approval on thread {thread_id!r}; nothing was changed "
            "(send the next message with run_turn)"
        )
    return budgets if budgets is not None else waiting.get("run_budgets")


def _last_reply(result: dict[str, Any]) -> AIMessage:
    for message in reversed(result.get("messages", [])):
        if isinstance(message, AIMessage):
            return message
    raise ModelError("the graph finished without a reply from the model")  # pragma: no cover
