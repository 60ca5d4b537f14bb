"""Token and cost budgets, approval before spending, and the usage ledger for LangChain v1 ``create_agent``.

    >>> from langchain.agents import create_agent
    >>> from remem.middleware import BudgetMiddleware
    >>> from remem.usage import Budgets, open_ledger
    >>> ledger = open_ledger("sqlite:///.remem/remem.db").__enter__()   # the thread's own database
    >>> agent = create_agent(model, tools=[...], checkpointer=saver, middleware=[
    ...     BudgetMiddleware(ledger, budgets=Budgets(turn_tokens=20_000, user_day_cost=2.0),
    ...                      prices=PriceTable({"gpt-4o-mini": Price(0.15, 0.60, 0.075)}))])

Every model call is checked twice and recorded once:

- before: a counted estimate of what is sent (system prompt + tool schemas + messages) against the call
  budget, and, added to what the ledger says the turn, the thread and the user's UTC day have spent, against
  theirs; a breach raises :class:`~remem.errors.BudgetExceededError` and nothing is sent;
- after: the provider's ``usage_metadata`` (counted when it has none) is recorded in the ledger, priced from
  the price table, then checked the same way: a breach only these numbers show is logged, and the reply,
  paid for, is kept; the next call meets the budget before it is sent.
- across processes: a call that a turn, thread or user-day budget could refuse holds its expected spending
  in the ledger while it runs, checked in the same transaction against what the scopes spent and what
  other calls hold, so processes sharing a budget (one user's threads in several workers) cannot all pass
  it; the ledger row settles the hold, a failed call releases it, and a crashed process's hold expires
  after ``hold_seconds`` (10 minutes by default; :mod:`remem.usage._holds`).

remem's agent (``build_agent``) drives the same :class:`~remem.usage._gate.Gate`, so both paths act the
same on every budget, threshold and action. ``run_turn(agent, thread, text, gate=budget)`` also checks a
turn's input before it is stored (:meth:`BudgetMiddleware.precheck`): a certain breach leaves nothing in
the thread.

Above ``approve_tokens`` / ``approve_cost`` the run pauses with a LangGraph ``interrupt`` carrying the
estimate (a checkpointer is needed); ``Command(resume=True)`` sends the call, ``Command(resume=False)`` ends
the turn with a message saying nothing was sent; the thread keeps every message.

The turn number is kept in the state as one integer (``remem_turn``, written with the model call's own
update, so no extra node runs), never a growing list: a call whose latest message is the user's starts a turn. With
``ContextCardMiddleware``, list it first (``middleware=[card, budget]``) so the budget sees the compacted
prompt that is really sent; in the other order the budget checks the uncompacted history (stricter).
``thread_id`` and ``user_id`` default to the run's ``configurable.thread_id`` / ``configurable.user_id``.
Budgets for one run go in its config, over the middleware's: ``configurable["remem_budgets"]`` (a
:class:`~remem.usage.Budgets`, or a mapping such as ``{"turn_cost": 0.05}``); resume a pause with the
same config (LangGraph keeps no object of a run's config: the pause's payload has them as
``run_budgets``). What a call over a budget does is ``budget_action`` (:mod:`remem.usage._breach`): an
error by default. Refusal notes of earlier turns are never sent to the model.

Rate limits: ``rate_limiter`` (a :class:`~remem.usage.ratelimit.RateLimiter`; by default the process's
shared one for the settings' ``[remem.rate_limits]``) is charged one request and the estimate before each
call, then corrected with the provider's count; a provider's 429 is retried with ``backoff`` (exponential,
jitter, Retry-After honoured; by default when a limiter or settings are given). A wait longer than the
maximum raises :class:`~remem.errors.RateLimitError`. A model that remem built from the settings
(:class:`~remem.models.RateLimitedChatModel`) keeps to the limits itself and is not charged twice.

The estimate is counted in the model's own encoding where it is known (OpenAI's models, with the
``tokens`` extra: :func:`~remem.messages.counter_for_model`), else approximately (``token_counter=`` sets
one for every model); ``bench/counting.py`` measures both against an exact tokenizer. A thread's messages
are counted once: a call reuses the count of the prompt's unchanged prefix from the thread's last call, so
a long thread's calls do not re-count the whole history; the total is the same as counting it all.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langgraph.types import Command

from remem.messages import (
    TokenCounter,
    approximate_token_count,
    counter_for_model,
    retried_copy,
    tool_schema_text,
    without_refusals,
)
from remem.models import RateLimitedChatModel, model_name
from remem.usage import BUDGETS_KEY, Budgets, Ledger, Meter, PriceTable, UsageEvent
from remem.usage._approval import Estimate
from remem.usage._gate import HOLD_SECONDS, Call, Decision, Gate
from remem.usage._pending import UNRECORDED
from remem.usage._prefix import PrefixCounter, sums_per_message
from remem.usage.ratelimit import Backoff, RateLimiter, acall_with_retries, call_with_retries, shared_limiter

__all__ = ["BudgetMiddleware", "BudgetState", "Estimate"]

log = logging.getLogger("remem.middleware")
_KEPT = 64  # models, and system prompt + tools sets, whose counters and counts a middleware keeps


class BudgetState(AgentState[Any]):
    """The agent's state plus the turn number (one integer) and the paid calls the ledger has not taken
    yet (normally none: :mod:`remem.usage._pending`)."""

    remem_turn: NotRequired[int]
    remem_unrecorded: NotRequired[list[dict[str, Any]]]


def _configurable() -> Mapping[str, Any]:
    from langgraph.config import get_config

    try:
        return get_config().get("configurable", {}) or {}
    except RuntimeError:  # outside a runnable context
        return {}


def _turn_of(state: Mapping[str, Any]) -> int:
    """The turn this call belongs to: a new one when the latest message is the user's (a tool round's
    latest message is a tool result, so its calls stay in the turn that asked for the tool)."""
    before = state.get("remem_turn")
    turn = before if isinstance(before, int) else 0
    messages = state.get("messages") or []
    return turn + 1 if messages and isinstance(messages[-1], HumanMessage) else max(turn, 1)


def _with_update(
    response: ModelResponse[Any],
    estimate: Estimate | None,
    state: Any,
    unrecorded: list[dict[str, Any]] | None,
    copy: BaseMessage | None = None,
) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
    """``response`` with the turn number when it changed, the kept ledger rows when they changed
    (``unrecorded`` None: unchanged), and the removal of a retried ``copy`` of the user's message, riding
    on the model call's own update: no extra node, no extra checkpoint; the rows are stored in the same
    checkpoint as the reply."""
    update: dict[str, Any] = {}
    if copy is not None:
        update["messages"] = [RemoveMessage(id=str(copy.id))]
    before = state.get("remem_turn") if isinstance(state, Mapping) else None
    if estimate is not None and estimate.turn is not None and before != estimate.turn:
        update["remem_turn"] = estimate.turn
    if unrecorded is not None:
        update[UNRECORDED] = unrecorded
    if not update:
        return response
    return ExtendedModelResponse(model_response=response, command=Command(update=update))


def _head(system: SystemMessage | None, tools: list[Any]) -> list[BaseMessage]:
    """What a call sends besides its messages: the system prompt and the tool schemas (as one message)."""
    head: list[BaseMessage] = [] if system is None else [system]
    schema = tool_schema_text(tools)
    if schema:
        head.append(SystemMessage(content=schema))
    return head


def _without_refusals(request: ModelRequest[Any]) -> ModelRequest[Any]:
    """``request`` without the refusal notes of earlier turns (remem's words to the person: never sent)."""
    messages = without_refusals(request.messages)
    return (
        request
        if messages is request.messages
        else request.override(messages=cast("list[AnyMessage]", messages))
    )


def _reply(response: ModelResponse[Any]) -> BaseMessage | None:
    for message in reversed(response.result):
        if isinstance(message, AIMessage):
            return message
    return None


class BudgetMiddleware(AgentMiddleware[BudgetState, Any, Any]):
    """Budgets per call, turn, thread and user per day; approval above a threshold; one ledger row per call.

    ``ledger`` None checks the call budget only (nothing to read spending from) and records nothing.
    ``budgets`` defaults to :meth:`Budgets.from_settings` of ``settings`` (or none); ``prices`` to the
    settings' ``[remem.prices]``. See the module docstring.
    """

    state_schema = BudgetState

    def __init__(
        self,
        ledger: Ledger | None = None,
        *,
        budgets: Budgets | None = None,
        prices: PriceTable | None = None,
        settings: Any = None,
        thread_id: str | None = None,
        user_id: str | None = None,
        token_counter: TokenCounter | None = None,
        approve_tokens: int | None = None,
        approve_cost: float | None = None,
        node: str = "model",
        rate_limiter: RateLimiter | None = None,
        backoff: Backoff | None = None,
        budget_action: str | None = None,
        hold_seconds: float = HOLD_SECONDS,
    ) -> None:
        super().__init__()
        if prices is None and settings is not None:
            prices = PriceTable.from_settings_rows(settings.prices)
        if settings is not None:
            approve_tokens = approve_tokens or settings.approval_token_threshold or None
            approve_cost = approve_cost or settings.approval_cost_threshold or None
        if budget_action is None:
            budget_action = settings.budget_action if settings is not None else "error"
        # A counter given is used for every model; else the model's exact encoding where it is known.
        self._given_counter = token_counter
        self.count = token_counter or approximate_token_count
        self.gate = Gate(
            ledger,
            budgets=budgets or (Budgets.from_settings(settings) if settings is not None else Budgets()),
            prices=prices,
            count=self.count,
            approve_tokens=approve_tokens,
            approve_cost=approve_cost,
            budget_action=budget_action,
            hold_seconds=hold_seconds,
        )
        self.thread_id, self.user_id, self.node = thread_id, user_id, node
        if rate_limiter is None and settings is not None:
            rate_limiter = shared_limiter(settings)
        if backoff is None and (rate_limiter is not None or settings is not None):
            backoff = Backoff.from_settings(settings) if settings is not None else Backoff()
        self.rate_limiter, self.backoff = rate_limiter, backoff
        # Counting reuses the last call's prefix for counters that sum over messages (remem's own).
        self._prefixes: dict[TokenCounter, PrefixCounter] = {}
        self._counters: dict[str, tuple[TokenCounter, PrefixCounter | None]] = {}
        self._heads: dict[tuple[Any, ...], tuple[tuple[Any, ...], int]] = {}
        self._prefix_lock = threading.Lock()
        self._model: str | None = (
            None  # the model of the latest call (run_turn's check counts with its counter)
        )

    # The gate's parts, read as the middleware's own.
    @property
    def ledger(self) -> Ledger | None:
        return self.gate.ledger

    @property
    def budgets(self) -> Budgets:
        return self.gate.budgets

    @property
    def prices(self) -> PriceTable:
        return self.gate.prices

    @property
    def meter(self) -> Meter | None:
        return self.gate.recording

    @property
    def approve_tokens(self) -> int | None:
        return self.gate.approve_tokens

    @property
    def approve_cost(self) -> float | None:
        return self.gate.approve_cost

    @property
    def budget_action(self) -> str:
        return self.gate.budget_action

    def counter_for(self, model: str) -> TokenCounter:
        """The counter of ``model``'s estimates: the one given, else its exact encoding when known
        (:func:`~remem.messages.counter_for_model`), else the approximate one."""
        return self._counter_and_prefix(model)[0]

    def _counter_and_prefix(self, model: str) -> tuple[TokenCounter, PrefixCounter | None]:
        # Found once per model (every call asks): the counter, and its prefix counter when it sums over
        # messages (remem's own; a counter of the caller's may not, and is given the whole prompt).
        found = self._counters.get(model)
        if found is not None:
            return found
        count = self._given_counter or counter_for_model(model) or approximate_token_count
        with self._prefix_lock:
            prefix = self._prefixes.get(count)
            if prefix is None and sums_per_message(count, model):
                prefix = self._prefixes[count] = PrefixCounter(count)
            if len(self._counters) >= _KEPT:
                self._counters.clear()
            found = self._counters[model] = (count, prefix)
        return found

    def _head_tokens(self, count: TokenCounter, system: SystemMessage | None, tools: list[Any]) -> int:
        """The counted system prompt and tool schemas, for a counter that sums over messages: once per
        counter, prompt and tools (the schemas' JSON is costly to build, and the same at every call)."""
        content = None if system is None else system.content
        if not isinstance(content, str | None):  # content blocks: not a key, counted every time
            return self._count_head(count, system, tools)
        key = (count, content, None if system is None else system.name, tuple(map(id, tools)))
        found = self._heads.get(key)
        if found is None:
            # The tools are kept with their count, so that no other object can take their ids meanwhile.
            found = (tuple(tools), self._count_head(count, system, tools))
            with self._prefix_lock:
                if len(self._heads) >= _KEPT:
                    self._heads.clear()
                self._heads[key] = found
        return found[1]

    @staticmethod
    def _count_head(count: TokenCounter, system: SystemMessage | None, tools: list[Any]) -> int:
        counted = _head(system, tools)
        return count(counted) if counted else 0

    # -- the pure parts ------------------------------------------------------------------------------
    def _count_messages(self, model: str, thread: str | None, system: Any, tools: list[Any]) -> Any:
        """The counted input of a call to ``model`` that sends some messages after ``system`` and ``tools``."""
        count, prefix = self._counter_and_prefix(model)
        if prefix is None:  # a counter of the caller's: given the whole prompt at once

            def whole(messages: Sequence[BaseMessage]) -> int:
                return count([*_head(system, tools), *messages])

            return whole
        head = self._head_tokens(count, system, tools)

        def summed(messages: Sequence[BaseMessage]) -> int:
            return head + (count(messages) if thread is None else prefix(thread, messages))

        return summed

    def estimate(self, request: ModelRequest[Any]) -> Estimate:
        """The counted input of ``request``: system prompt, tool schemas and messages."""
        return self.gate.estimate(self._call(request, None), self._tokens(request))

    def _tokens(self, request: ModelRequest[Any]) -> int:
        conf = _configurable()
        count = self._count_messages(
            model_name(request.model),
            self.thread_id or conf.get("thread_id"),
            request.system_message,
            request.tools,
        )
        return int(count(request.messages))

    def _call(self, request: ModelRequest[Any], tokens: int | None) -> Call:
        """The gate's view of the call ``request`` makes (``tokens``: its estimate, counted already)."""
        conf = _configurable()
        model = model_name(request.model)
        thread = self.thread_id or conf.get("thread_id")
        fit_count, _ = self._counter_and_prefix(model)
        state = request.state or {}
        return Call(
            model,
            request.messages,
            self._count_messages(model, thread, request.system_message, request.tools),
            fit_count,
            head=self._head_tokens(fit_count, request.system_message, request.tools),
            thread_id=thread,
            user_id=self.user_id or conf.get("user_id"),
            turn=_turn_of(state) if isinstance(state, Mapping) else None,
            run_budgets=conf.get(BUDGETS_KEY),
            tokens=tokens,
        )

    def budgets_for(self, estimate: Estimate) -> Budgets:
        """The middleware's budgets, with those the run's config gave for it over them
        (``configurable["remem_budgets"]``: :func:`~remem.usage.budgets.run_budgets`)."""
        return self.gate.budgets_for(estimate.run_budgets)

    def precheck(self, values: Mapping[str, Any], messages: list[BaseMessage], config: Any) -> None:
        """:func:`remem.agent.run_turn`'s check before a turn's input is stored (``run_turn(...,
        gate=budget)``): what the call will certainly send, the turn's input, counted with the latest
        call's model, added to what its scopes spent, against every budget: a certain breach refuses the
        input having written nothing (``error``; ``compact`` when the input alone cannot fit)."""
        conf = (config or {}).get("configurable") or {}
        thread = self.thread_id or conf.get("thread_id")
        model = self._model or ""  # no call yet: no model, no price
        fit_count, _ = self._counter_and_prefix(model)
        merged = [*values.get("messages", []), *messages]
        call = Call(
            model,
            messages,
            fit_count,
            fit_count,
            thread_id=None if thread is None else str(thread),
            user_id=self.user_id or conf.get("user_id"),
            turn=_turn_of({**values, "messages": merged}),
            run_budgets=conf.get(BUDGETS_KEY),
        )
        self.gate.flush(values)
        self.gate.precheck(call, exact=False)

    # -- the hooks -----------------------------------------------------------------------------------
    def _decide(self, request: ModelRequest[Any]) -> tuple[ModelRequest[Any], Decision, BaseMessage | None]:
        """The request to send, the gate's decision, and the copy of the user's message a retry added
        (the same message sent again after a failure: dropped, so the kept turn is answered once)."""
        request = _without_refusals(request)
        copy = retried_copy(request.messages)
        if copy is not None:
            request = request.override(messages=list(request.messages[:-1]))
        estimate = self.estimate(request)  # counted always: the rate limiter is charged it too
        self._model = estimate.model
        decision = self.gate.before(self._call(request, estimate.input_tokens), request.state)
        if decision.messages is not request.messages:  # compacted to fit
            request = request.override(messages=cast("list[AnyMessage]", list(decision.messages)))
        return request, decision, copy

    def _finish(
        self, request: ModelRequest[Any], decision: Decision, response: ModelResponse[Any], started: float
    ) -> tuple[UsageEvent | None, list[dict[str, Any]] | None]:
        """The paid call's event, recorded (the rate limiter corrected with it), and the kept rows."""
        reply = _reply(response)
        event = None
        if reply is not None:
            sent: list[BaseMessage] = [] if request.system_message is None else [request.system_message]
            event = self.gate.event(
                decision, reply, sent=[*sent, *request.messages], started=started, node=self.node
            )
        if self._limited(request) and self.rate_limiter is not None and event is not None:
            assert decision.estimate is not None  # the middleware always counts
            self.rate_limiter.settle(decision.call.model, decision.estimate.input_tokens, event.tokens)
        return event, self.gate.after(decision, event)

    def _limited(self, request: ModelRequest[Any]) -> bool:
        """Whether this middleware applies the rate limit (a model remem built applies it itself)."""
        return not isinstance(request.model, RateLimitedChatModel)

    @staticmethod
    def _refused(
        message: AIMessage, decision: Decision, state: Any, copy: BaseMessage | None
    ) -> AIMessage | ModelResponse[Any] | ExtendedModelResponse[Any]:
        if not decision.flushed and copy is None:
            return message
        response = ModelResponse(result=[message])
        return _with_update(response, None, state, [] if decision.flushed else None, copy)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        request, decision, copy = self._decide(request)
        if decision.not_sent is not None:
            return self._refused(decision.not_sent, decision, request.state, copy)
        assert decision.estimate is not None
        try:
            limited = self._limited(request)
            if limited and self.rate_limiter is not None:
                self.rate_limiter.acquire(decision.call.model, decision.estimate.input_tokens)
            started = time.perf_counter()
            if limited and self.backoff is not None:
                response = call_with_retries(
                    lambda: handler(request), model=decision.call.model, backoff=self.backoff
                )
            else:
                response = handler(request)
            _, kept = self._finish(request, decision, response, started)
        except BaseException:
            self.gate.release(decision)  # not paid: what it held of the budgets is free again
            raise
        return _with_update(response, decision.estimate, request.state, kept, copy)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        request, decision, copy = await asyncio.to_thread(self._decide, request)
        if decision.not_sent is not None:
            return self._refused(decision.not_sent, decision, request.state, copy)
        assert decision.estimate is not None
        try:
            limited = self._limited(request)
            if limited and self.rate_limiter is not None:
                await self.rate_limiter.aacquire(decision.call.model, decision.estimate.input_tokens)
            started = time.perf_counter()
            if limited and self.backoff is not None:
                response = await acall_with_retries(
                    lambda: handler(request), model=decision.call.model, backoff=self.backoff
                )
            else:
                response = await handler(request)
            _, kept = await asyncio.to_thread(self._finish, request, decision, response, started)
        except BaseException:
            await asyncio.to_thread(self.gate.release, decision)
            raise
        return _with_update(response, decision.estimate, request.state, kept, copy)
