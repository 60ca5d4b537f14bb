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
  the price table, then checked the same way (the call was paid: it is in the ledger, and the error says so).

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
``run_budgets``). What a call over a budget does is ``budget_action`` (:mod:`remem.usage.breach`): an
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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.types import Command

from remem.errors import BudgetExceededError
from remem.messages import TokenCounter, approximate_token_count, counter_for_model
from remem.middleware._compaction import tool_schema_text
from remem.models import RateLimitedChatModel, model_name
from remem.usage import BUDGETS_KEY, Budgets, Ledger, Meter, PriceTable, Scope, Totals, UsageEvent, check
from remem.usage._pending import UNRECORDED, flush_unrecorded, record_or_keep
from remem.usage._prefix import PrefixCounter, sums_per_message
from remem.usage.approval import Estimate, ask_approval, needs_approval, refusal, without_refusals
from remem.usage.breach import cannot_fit, check_budget_action, fit_messages, fitting_tokens, refuse_or_ask
from remem.usage.budgets import run_budgets
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
    response: ModelResponse[Any], estimate: Estimate, state: Any, unrecorded: list[dict[str, Any]] | None
) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
    """``response`` with the turn number when it changed, and the kept ledger rows when they changed
    (``unrecorded`` None: unchanged), riding on the model call's own update: no extra node, no extra
    checkpoint; the rows are stored in the same checkpoint as the reply."""
    update: dict[str, Any] = {}
    before = state.get("remem_turn") if isinstance(state, Mapping) else None
    if estimate.turn is not None and before != estimate.turn:
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
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.budgets = budgets or (Budgets.from_settings(settings) if settings is not None else Budgets())
        if prices is None and settings is not None:
            prices = PriceTable.from_settings_rows(settings.prices)
        self.prices = prices or PriceTable()
        # A counter given is used for every model; else the model's exact encoding where it is known.
        self._given_counter = token_counter
        self.count = token_counter or approximate_token_count
        self.meter = None if ledger is None else Meter(ledger, self.prices, count=self.count)
        if settings is not None:
            approve_tokens = approve_tokens or settings.approval_token_threshold or None
            approve_cost = approve_cost or settings.approval_cost_threshold or None
        self.approve_tokens, self.approve_cost = approve_tokens, approve_cost
        if budget_action is None:
            budget_action = settings.budget_action if settings is not None else "error"
        self.budget_action = check_budget_action(budget_action)
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
    def estimate(self, request: ModelRequest[Any]) -> Estimate:
        """The counted input of ``request``: system prompt, tool schemas and messages."""
        conf = _configurable()
        thread = self.thread_id or conf.get("thread_id")
        model = model_name(request.model)
        count, prefix = self._counter_and_prefix(model)
        if prefix is None:  # a counter of the caller's: given the whole prompt at once
            tokens = count([*_head(request.system_message, request.tools), *request.messages])
        else:
            head = self._head_tokens(count, request.system_message, request.tools)
            tokens = head + (count(request.messages) if thread is None else prefix(thread, request.messages))
        state = request.state or {}
        turn = _turn_of(state) if isinstance(state, Mapping) else None
        return Estimate(
            model=model,
            input_tokens=tokens,
            cost=self.prices.cost(model, tokens, 0),
            thread_id=thread,
            user_id=self.user_id or conf.get("user_id"),
            turn=turn,
            run_budgets=run_budgets(conf.get(BUDGETS_KEY)),
        )

    def budgets_for(self, estimate: Estimate) -> Budgets:
        """The middleware's budgets, with those the run's config gave for it over them
        (``configurable["remem_budgets"]``: :func:`~remem.usage.budgets.run_budgets`)."""
        return self.budgets.merged(estimate.run_budgets)

    def _spent(self, estimate: Estimate, state: Any, budgets: Budgets) -> tuple[dict[Scope, Totals], bool]:
        """What the call's scopes spent (one read, only of the scopes with a budget), after writing the
        paid calls an earlier ledger failure left in the state; and whether there were any."""
        if self.ledger is None:
            return {}, False
        flushed = flush_unrecorded(self.ledger, state)
        found = self.ledger.spent_in(
            budgets.read_scopes,
            thread_id=estimate.thread_id,
            turn=estimate.turn,
            user_id=estimate.user_id,
        )
        return cast("dict[Scope, Totals]", found), flushed

    def _before(
        self, request: ModelRequest[Any], estimate: Estimate, spent: Mapping[Scope, Totals], budgets: Budgets
    ) -> tuple[ModelRequest[Any], Estimate, AIMessage | None]:
        """Check the estimate against the budgets (a breach does what ``budget_action`` says) and the
        approval thresholds: the request to send, its estimate, and the message that ends the turn
        instead (None: send it)."""
        try:
            check(budgets, tokens=estimate.input_tokens, cost=estimate.cost, spent=spent, estimated=True)
        except BudgetExceededError as breach:
            if self.budget_action == "error":
                raise
            if self.budget_action != "compact":  # approved over the budget: no threshold asks again
                return request, estimate, refuse_or_ask(self.budget_action, breach, estimate)
            request, estimate = self._compacted(breach, request, estimate, spent, budgets)
        if not needs_approval(estimate, self.approve_tokens, self.approve_cost) or ask_approval(estimate):
            return request, estimate, None
        return request, estimate, refusal(estimate)

    def _compacted(
        self,
        breach: BudgetExceededError,
        request: ModelRequest[Any],
        estimate: Estimate,
        spent: Mapping[Scope, Totals],
        budgets: Budgets,
    ) -> tuple[ModelRequest[Any], Estimate]:
        """``request`` with the newest messages that keep it within every budget (budget_action
        ``compact``: :mod:`remem.usage.breach`), and its estimate."""
        count, _ = self._counter_and_prefix(estimate.model)
        head = self._head_tokens(count, request.system_message, request.tools)
        room = fitting_tokens(budgets, spent, self.prices.price(estimate.model)) - head
        fitted = fit_messages(request.messages, room, count)
        if fitted is None:
            raise cannot_fit(breach) from breach
        request = request.override(messages=cast("list[AnyMessage]", fitted))
        estimate = self.estimate(request)
        check(budgets, tokens=estimate.input_tokens, cost=estimate.cost, spent=spent, estimated=True)
        return request, estimate

    def _event(
        self, request: ModelRequest[Any], estimate: Estimate, response: ModelResponse[Any], started: float
    ) -> UsageEvent | None:
        reply = _reply(response)
        if reply is None:
            return None
        meter = self.meter or Meter(_NoLedger(), self.prices, count=self.count)
        sent: list[BaseMessage] = [] if request.system_message is None else [request.system_message]
        reply_id = getattr(reply, "id", None)
        return meter.reply_event(
            "chat",
            estimate.model,
            [*sent, *request.messages],
            reply,
            started=started,
            counted_input=estimate.input_tokens,  # the prompt as counted before the call, tool schemas too
            thread_id=estimate.thread_id,
            user_id=estimate.user_id,
            turn=estimate.turn,
            node=self.node,
            call_id=f"{estimate.thread_id}:{reply_id}" if reply_id and estimate.thread_id else None,
        )

    def _after(
        self, event: UsageEvent | None, spent: Mapping[Scope, Totals], flushed: bool, budgets: Budgets
    ) -> list[dict[str, Any]] | None:
        """Record the paid call and check it; the state's kept rows when they change (else None).

        A ledger that refuses the row does not fail the call (its reply would be lost, and a resume would
        pay again): the row is kept in the state with the reply (:mod:`remem.usage._pending`). A breach
        that only the provider's numbers show raises once the row is recorded (budget_action ``error``);
        with the row only kept, or another action (the call may have been approved over the budget), it is
        logged, so that the reply it paid for is kept and the next call's check counts it."""
        if event is None:
            return [] if flushed else None
        kept = [] if self.ledger is None else record_or_keep(self.ledger, event)
        try:
            check(budgets, tokens=event.tokens, cost=event.cost, spent=spent, estimated=False)
        except BudgetExceededError as exc:
            if not kept and self.budget_action == "error":
                raise
            log.warning(
                "%s; the reply was kept (it was paid for), and the next model call meets the budget", exc
            )
        return kept if kept or flushed else None

    def _limited(self, request: ModelRequest[Any]) -> bool:
        """Whether this middleware applies the rate limit (a model remem built applies it itself)."""
        return not isinstance(request.model, RateLimitedChatModel)

    def _settle(self, estimate: Estimate, event: UsageEvent | None) -> None:
        if self.rate_limiter is not None and event is not None:
            self.rate_limiter.settle(estimate.model, estimate.input_tokens, event.tokens)

    # -- the hooks -----------------------------------------------------------------------------------
    @staticmethod
    def _refused(message: AIMessage, flushed: bool) -> AIMessage | ExtendedModelResponse[Any]:
        if not flushed:
            return message
        return ExtendedModelResponse(
            model_response=ModelResponse(result=[message]), command=Command(update={UNRECORDED: []})
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        request = _without_refusals(request)
        estimate = self.estimate(request)
        budgets = self.budgets_for(estimate)
        spent, flushed = self._spent(estimate, request.state, budgets)
        request, estimate, not_sent = self._before(request, estimate, spent, budgets)
        if not_sent is not None:
            return self._refused(not_sent, flushed)
        limited = self._limited(request)
        if limited and self.rate_limiter is not None:
            self.rate_limiter.acquire(estimate.model, estimate.input_tokens)
        started = time.perf_counter()
        if limited and self.backoff is not None:
            response = call_with_retries(lambda: handler(request), model=estimate.model, backoff=self.backoff)
        else:
            response = handler(request)
        event = self._event(request, estimate, response, started)
        if limited:
            self._settle(estimate, event)
        kept = self._after(event, spent, flushed, budgets)
        return _with_update(response, estimate, request.state, kept)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        request = _without_refusals(request)
        estimate = self.estimate(request)
        budgets = self.budgets_for(estimate)
        spent, flushed = await asyncio.to_thread(self._spent, estimate, request.state, budgets)
        request, estimate, not_sent = self._before(request, estimate, spent, budgets)
        if not_sent is not None:
            return self._refused(not_sent, flushed)
        limited = self._limited(request)
        if limited and self.rate_limiter is not None:
            await self.rate_limiter.aacquire(estimate.model, estimate.input_tokens)
        started = time.perf_counter()
        if limited and self.backoff is not None:
            response = await acall_with_retries(
                lambda: handler(request), model=estimate.model, backoff=self.backoff
            )
        else:
            response = await handler(request)
        event = self._event(request, estimate, response, started)
        if limited:
            self._settle(estimate, event)
        kept = await asyncio.to_thread(self._after, event, spent, flushed, budgets)
        return _with_update(response, estimate, request.state, kept)


class _NoLedger(Ledger):
    """Prices events without storing them (a middleware given no ledger)."""

    def setup(self) -> None:
        return None

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        return None

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return []
