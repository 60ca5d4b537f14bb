"""The one gate every model call of a turn passes: estimate, budgets, approval, what a breach does, recording.

remem's agent (``build_agent``'s ``call_model``) and ``BudgetMiddleware`` both drive a :class:`Gate`, so the
two paths cannot drift::

    call = Call(model, messages, count, head=..., fit_count=..., thread_id=..., user_id=..., turn=...)
    decision = gate.before(call, state)        # kept rows flushed; estimate; budgets; hold; approval
    if decision.not_sent is not None: ...      # the turn ends with that message; nothing is sent
    try:
        reply = model.invoke(decision.messages)
    except BaseException:
        gate.release(decision)                 # not paid: its hold goes
        raise
    kept = gate.after(decision, gate.event(decision, reply, sent=..., started=..., node=...))

The rules, the same on every path:

- **Before the call** the counted estimate (:class:`Call`'s ``count``), added to what the ledger says the
  turn, the thread and the user's UTC day spent, is checked against every budget; a breach does what
  ``budget_action`` says (:mod:`remem.usage._breach`): ``error`` raises
  :class:`~remem.errors.BudgetExceededError` and nothing is sent. Above an approval threshold the run
  pauses (:mod:`remem.usage._approval`).
- **Before the input is stored**: :meth:`Gate.precheck` runs the same check on the turn that is about to be
  sent (``run_turn`` calls it), so an input that ``error`` (or ``compact`` that cannot fit) would refuse
  leaves nothing in the thread. The call that follows reuses that check's count, reads and hold: the
  precheck of a call that can be held holds it (the check is the hold's own), so the call does not read
  or hold again. A hold the call does not take (it sends other messages, or the turn fails before it) is
  released: by the call, or by :meth:`Gate.drop_precheck` (``run_turn``, whatever the turn did).
- **Across processes**: a call that a turn, thread or user-day budget could refuse is *held* before it
  is sent (:mod:`remem.usage._holds`): the check is made again in the transaction that holds the call's
  expected spending, against what the scopes spent and what other calls in flight hold, so processes
  sharing a budget cannot all pass it at once. The ledger row settles the hold; a call that fails, or is
  not sent, releases it; while the call runs its process renews the hold, and a crashed process's hold
  expires ``hold_seconds`` after its last renewal.
- **After the call** the provider's numbers (counted when it gives none) are recorded, then checked: a
  breach that only they show is logged, never raised: the reply was paid for, so it is kept (in the
  thread and returned to the caller), and the ledger holds the spending, so the next call meets the
  budget before it is sent.
- A ledger that refuses a paid call's row does not lose it: the row is kept in the state with the reply
  (:mod:`remem.usage._pending`) and written by the thread's next call, before its check; every kept row
  has a call id, so a resumed run that records the call again adds nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage

from remem.errors import ArgumentTypeError, BudgetExceededError, RememError, StorageError
from remem.messages import TokenCounter
from remem.usage._approval import Estimate, ask_approval, needs_approval, refusal
from remem.usage._base import Ledger, scope_keys
from remem.usage._breach import cannot_fit, check_budget_action, fit_messages, fitting_tokens, refuse_or_ask
from remem.usage._holds import Key, Renewals
from remem.usage._pending import flush_unrecorded, record_or_keep
from remem.usage._prefix import signatures
from remem.usage._records import Totals, UsageEvent, call_id_of
from remem.usage.budgets import Budgets, Scope, check, run_budgets
from remem.usage.meter import Meter
from remem.usage.prices import PriceTable

__all__ = ["HOLD_SECONDS", "Call", "Decision", "Gate"]

log = logging.getLogger("remem.usage")

_CHECKS_KEPT = 1024  # threads whose precheck a gate keeps for the call that follows
HOLD_SECONDS = 600.0  # how long a call's hold lasts when its process dies before settling it
_HOLD_TRIES = 20  # holds refused by other processes' spending before the gate gives up


@dataclass(frozen=True)
class Call:
    """One model call about to be made, as its caller sees it.

    ``messages`` is what the call sends besides its ``head`` (the tool schemas, and the system prompt when
    it is not one of ``messages``); ``count(messages)`` is the call's counted input for those messages,
    the head included; ``head`` is that head's count, left out of the room a compaction fits messages
    into; ``fit_count`` counts messages for that fitting. ``tokens``: the count of ``messages`` when the
    caller made it already. ``run_budgets``: the budgets given for this run (``configurable``).
    """

    model: str
    messages: Sequence[BaseMessage]
    count: Callable[[Sequence[BaseMessage]], int]
    fit_count: TokenCounter
    head: int = 0
    thread_id: str | None = None
    user_id: str | None = None
    turn: int | None = None
    run_budgets: Any = None
    tokens: int | None = None


@dataclass(frozen=True)
class Decision:
    """What :meth:`Gate.before` decided: the messages to send (compacted or as given), their estimate (None:
    nothing had to be counted), what the call's scopes had spent, the budgets it was checked against, the
    message that ends the turn instead of the call (None: send it), whether kept ledger rows were
    written (the caller empties the state's key with its update), and the call's hold (None: none taken;
    :meth:`Gate.after` settles it, :meth:`Gate.release` drops it)."""

    call: Call
    messages: Sequence[BaseMessage]
    estimate: Estimate | None
    spent: Mapping[Scope, Totals]
    budgets: Budgets
    not_sent: AIMessage | None = None
    flushed: bool = False
    hold: str | None = None


@dataclass(frozen=True)
class _Checked:
    """What a precheck found for a thread's next call (:meth:`Gate.precheck`): the call's turn, its
    messages' signatures and budgets (what must match), its count, what its scopes had spent, the scopes
    it held and its hold (None: not held)."""

    turn: int | None
    signatures: list[Any]
    budgets: Budgets
    tokens: int
    spent: dict[Scope, Totals]
    keys: list[Key]
    hold: str | None


def _always(fresh: Mapping[str, Totals]) -> bool:
    return True


def _fitting(budgets: Budgets, estimate: Estimate) -> Callable[[Mapping[str, Totals]], bool]:
    """Whether a call of ``estimate`` passes ``budgets`` on a hold's fresh read of its scopes."""

    def fits(fresh: Mapping[str, Totals]) -> bool:
        spent = cast("Mapping[Scope, Totals]", fresh)
        try:
            check(budgets, tokens=estimate.input_tokens, cost=estimate.cost, spent=spent, estimated=True)
        except BudgetExceededError:
            return False
        return True

    return fits


class _NoLedger(Ledger):
    """Prices events without storing them (a gate with no ledger)."""

    def setup(self) -> None:
        return None

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        return None

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return []


class Gate:
    """Budgets, approval thresholds, the breach action and the ledger of one agent (see the module).

    ``ledger`` None checks the call budget only (nothing to read spending from) and records nothing.
    ``count`` counts a reply (and a prompt) that carries no provider usage. ``hold_seconds``: how long a
    call's hold outlives a process that died during the call. Thread-safe.
    """

    def __init__(
        self,
        ledger: Ledger | None = None,
        *,
        budgets: Budgets | None = None,
        prices: PriceTable | None = None,
        count: TokenCounter | None = None,
        approve_tokens: int | None = None,
        approve_cost: float | None = None,
        budget_action: str = "error",
        hold_seconds: float = HOLD_SECONDS,
    ) -> None:
        if isinstance(hold_seconds, bool) or not isinstance(hold_seconds, int | float) or hold_seconds <= 0:
            raise ArgumentTypeError(f"hold_seconds is a number of seconds above 0; got {hold_seconds!r}")
        self.hold_seconds = float(hold_seconds)
        self.ledger = ledger
        self.budgets = budgets or Budgets()
        self.meter = Meter(ledger if ledger is not None else _NoLedger(), prices, count=count)
        self.approve_tokens, self.approve_cost = approve_tokens or None, approve_cost or None
        self.budget_action = check_budget_action(budget_action)
        # Per thread, the call a precheck checked: its turn, its messages' signatures, its budgets, its
        # count, its scopes' spending and its hold (None: none taken), reused by the call that follows
        # when nothing changed between.
        self._checked: dict[str, _Checked] = {}
        self._lock = threading.Lock()
        self._renewals = None if ledger is None else Renewals(self._renew, self.hold_seconds)

    def _renew(self, hold_id: str) -> None:
        assert self.ledger is not None
        self.ledger.renew(hold_id, self.hold_seconds)

    @property
    def recording(self) -> Meter | None:
        """The meter that records into the ledger (None: the gate has no ledger and records nothing)."""
        return None if self.ledger is None else self.meter

    @property
    def prices(self) -> PriceTable:
        return self.meter.prices

    @property
    def asks(self) -> bool:
        """Whether an approval threshold is set (then every call is counted)."""
        return self.approve_tokens is not None or self.approve_cost is not None

    def budgets_for(self, given: object) -> Budgets:
        """The gate's budgets, with those given for one run over them (:meth:`Budgets.merged`)."""
        return self.budgets.merged(given)

    def estimate(self, call: Call, tokens: int) -> Estimate:
        """What an approval pause carries: the call's counted input, its cost and the run's own budgets."""
        return Estimate(
            model=call.model,
            input_tokens=tokens,
            cost=self._cost(call, tokens),
            thread_id=call.thread_id,
            user_id=call.user_id,
            turn=call.turn,
            run_budgets=run_budgets(call.run_budgets),
        )

    def flush(self, state: Any) -> bool:
        """Write the paid calls a failed ledger write left in ``state``; True when it held any."""
        return self.ledger is not None and flush_unrecorded(self.ledger, state)

    def spent(self, call: Call, budgets: Budgets) -> dict[Scope, Totals]:
        """What the call's scopes spent so far (one read, only of the scopes with a budget)."""
        if self.ledger is None:
            return {}
        found = self.ledger.spent_in(
            budgets.read_scopes, thread_id=call.thread_id, turn=call.turn, user_id=call.user_id
        )
        return cast("dict[Scope, Totals]", found)

    # -- before the call ---------------------------------------------------------------------------
    def precheck(self, call: Call, *, exact: bool = True) -> None:
        """The check :meth:`before` makes, made before the turn's input is stored, so that an input the
        call would refuse with an error is refused having written nothing (``error``; ``compact`` when
        not even the latest user message fits). The other actions act in the call, once the input is
        stored (the thread keeps it with the turn's ending message).

        A call that can be held is held here, its check the hold's own (one transaction, no read before
        it); the call that follows takes the hold, and :meth:`drop_precheck` releases one it did not take.

        ``exact`` False: ``call`` holds only what the call will certainly send (a lower bound of its
        estimate): a breach it shows is certain; its count is not reused by the call, nor held.
        """
        budgets = self.budgets_for(call.run_budgets)
        if not budgets.active:
            return
        tokens = call.count(call.messages)
        estimate = self.estimate(call, tokens)
        keys = self._keys(call, budgets) if exact and call.thread_id is not None else []
        hold: str | None = None
        if keys:
            hold, spent = self._hold(call, keys, estimate, _fitting(budgets, estimate), None)
        else:
            spent = self.spent(call, budgets)
        if hold is None:  # not held: it does not fit (the hold's check is this one), or cannot be held
            try:
                check(budgets, tokens=tokens, cost=estimate.cost, spent=spent, estimated=True)
            except BudgetExceededError as breach:
                if self.budget_action == "compact":
                    self._fit(breach, call, spent, budgets, quiet=True)  # raises when nothing fits
                elif self.budget_action == "error":
                    raise
                return
        if exact and call.thread_id is not None:
            checked = _Checked(call.turn, signatures(call.messages), budgets, tokens, spent, keys, hold)
            with self._lock:
                dropped = [self._checked.pop(call.thread_id, None)]
                if len(self._checked) >= _CHECKS_KEPT:
                    dropped += self._checked.values()
                    self._checked = {}
                self._checked[call.thread_id] = checked
            for old in dropped:
                if old is not None:
                    self._release(old.hold)

    def drop_precheck(self, thread_id: str) -> None:
        """Forget the precheck of ``thread_id``'s next call, releasing its hold if the call did not take it
        (``run_turn`` calls this once the turn ended, however it ended)."""
        with self._lock:
            checked = self._checked.pop(thread_id, None)
        if checked is not None:
            self._release(checked.hold)

    async def adrop_precheck(self, thread_id: str) -> None:
        """Async version of :meth:`drop_precheck`: the release, the only I/O (a hold no call took), runs
        in a worker thread, never on the event loop."""
        with self._lock:
            checked = self._checked.pop(thread_id, None)
        if checked is not None and checked.hold is not None:
            await asyncio.to_thread(self._release, checked.hold)

    def _prechecked(self, call: Call, budgets: Budgets) -> _Checked | None:
        """The precheck of this very call (same turn, messages, budgets and held scopes): the thread's
        lease kept anything else of the thread from spending or writing between the two. A precheck of
        another call is dropped, its hold released."""
        if call.thread_id is None:
            return None
        with self._lock:
            checked = self._checked.pop(call.thread_id, None)
        if checked is None:
            return None
        same = (checked.turn, checked.signatures, checked.budgets) == (
            call.turn,
            signatures(call.messages),
            budgets,
        )
        if not same or (checked.hold is not None and checked.keys != self._keys(call, budgets)):
            self._release(checked.hold)
            return None
        return checked

    def before(self, call: Call, state: Any = None) -> Decision:
        """Decide the call: write the state's kept rows, count the call when a budget or a threshold needs
        it, check every budget (a breach does what ``budget_action`` says) and the approval thresholds."""
        flushed = self.flush(state)
        budgets = self.budgets_for(call.run_budgets)
        if not budgets.active and not self.asks and call.tokens is None:
            return Decision(call, call.messages, None, {}, budgets, None, flushed)  # nothing to count
        checked = self._prechecked(call, budgets) if budgets.active else None
        if checked is not None:
            tokens, spent = checked.tokens, checked.spent
        else:
            tokens = call.tokens if call.tokens is not None else call.count(call.messages)
            spent = self.spent(call, budgets)
        held = checked.hold if checked is not None else None
        try:
            decision, over = self._decide(
                Decision(call, call.messages, None, spent, budgets, None, flushed), tokens
            )
        except BaseException:  # refused (a check the hold passed passes again: not expected)
            self._release(held)
            raise
        if held is not None and decision.not_sent is None and decision.messages is call.messages and not over:
            decision = dataclasses.replace(decision, hold=held)  # the precheck held this very call
        else:
            self._release(held)
            decision, over = self._held(decision, over, tokens)
        if over or decision.not_sent is not None:  # approved over the budget: no threshold asks again
            return decision
        estimate = decision.estimate
        assert estimate is not None
        try:
            asked = needs_approval(estimate, self.approve_tokens, self.approve_cost)
            if asked and not ask_approval(estimate):
                self.release(decision)
                return dataclasses.replace(decision, not_sent=refusal(estimate), hold=None)
        except BaseException:  # the run pauses for a person (LangGraph's interrupt): nothing is sent yet
            self.release(decision)
            raise
        return decision

    def _decide(self, decision: Decision, tokens: int) -> tuple[Decision, bool]:
        """The budgets' part of a decision, on what ``decision.spent`` says the scopes spent: the messages
        to send and their estimate, or the message that ends the turn (``budget_action``); and whether
        a person approved the call over a budget."""
        call, budgets, spent = decision.call, decision.budgets, decision.spent
        messages, estimate = call.messages, self.estimate(call, tokens)
        try:
            check(budgets, tokens=tokens, cost=estimate.cost, spent=spent, estimated=True)
        except BudgetExceededError as breach:
            if self.budget_action == "error":
                raise
            if self.budget_action != "compact":
                not_sent = refuse_or_ask(self.budget_action, breach, estimate)
                return dataclasses.replace(decision, estimate=estimate, not_sent=not_sent), not_sent is None
            messages, estimate = self._fit(breach, call, spent, budgets)
        return dataclasses.replace(decision, messages=messages, estimate=estimate, not_sent=None), False

    def _keys(self, call: Call, budgets: Budgets) -> list[Key]:
        """The running totals a hold of ``call`` takes of (none without a ledger or a scope budget)."""
        if self.ledger is None:
            return []
        return scope_keys(budgets.read_scopes, thread_id=call.thread_id, turn=call.turn, user_id=call.user_id)

    def _hold(
        self,
        call: Call,
        keys: list[Key],
        estimate: Estimate,
        fits: Callable[[Mapping[str, Totals]], bool],
        spent: Mapping[Scope, Totals] | None,
    ) -> tuple[str | None, dict[Scope, Totals]]:
        """Hold ``estimate`` of ``keys`` with the output the call is expected to add: from ``spent`` (what
        was read before), else from the hold's own read. Renewed until settled or released."""
        assert self.ledger is not None

        def output_of(read: Mapping[str, Totals]) -> tuple[int, float]:
            output = self._expected_output(cast("Mapping[Scope, Totals]", read))
            extra = self.prices.cost(call.model, 0, output) if output and estimate.cost is not None else 0.0
            return output, extra or 0.0

        known = output_of(cast("Mapping[str, Totals]", spent)) if spent is not None else (0, 0.0)
        hold, fresh = self.ledger.hold(
            keys,
            tokens=estimate.input_tokens + known[0],
            cost=(estimate.cost or 0.0) + known[1],
            seconds=self.hold_seconds,
            fits=fits,
            more=output_of if spent is None else None,
        )
        if hold is not None and self._renewals is not None:
            self._renewals.start(hold)
        return hold, cast("dict[Scope, Totals]", fresh)

    def _held(self, decision: Decision, over: bool, tokens: int) -> tuple[Decision, bool]:
        """The decision with its call held (:mod:`remem.usage._holds`): the budgets checked again in the
        hold's transaction, against what the scopes spent and what other calls hold; when that spending
        no longer lets the call through, decided again on it. A call approved over a budget is held
        without a check (a person said yes); one with no scope budget, or no ledger, is not held."""
        for _ in range(_HOLD_TRIES):
            estimate = decision.estimate
            if decision.not_sent is not None or estimate is None or self.ledger is None:
                return decision, over
            keys = self._keys(decision.call, decision.budgets)
            if not keys:
                return decision, over
            fits = _always if over else _fitting(decision.budgets, estimate)
            hold, spent = self._hold(decision.call, keys, estimate, fits, decision.spent)
            if hold is not None:
                return dataclasses.replace(decision, spent=spent, hold=hold), over
            # Other processes spent (or hold) more since the read: decided again on what they did.
            decision, over = self._decide(dataclasses.replace(decision, spent=spent), tokens)
        raise StorageError(
            f"the budgets of this call could not be held: {_HOLD_TRIES} times, other calls in flight took "
            "what the check had seen free; try the call again"
        )

    @staticmethod
    def _expected_output(spent: Mapping[Scope, Totals]) -> int:
        """The output a call is expected to add, held with its input: what its scopes' calls averaged (0
        before any). Its own check counts its input only, as a lone process's does; another process's
        check counts this output too, so that concurrent calls near a budget pass it no further than one
        call alone would."""
        averages = [-(-t.output_tokens // t.calls) for t in spent.values() if t.calls]
        return max(averages, default=0)

    def release(self, decision: Decision) -> None:
        """Drop the hold of a call that was not paid (its model call failed, or it was not sent); a ledger
        that refuses leaves it to expire (``hold_seconds``)."""
        self._release(decision.hold)

    def _release(self, hold: str | None) -> None:
        if hold is None or self.ledger is None:
            return
        if self._renewals is not None:
            self._renewals.stop(hold)
        try:
            self.ledger.release(hold)
        except RememError as exc:
            log.warning(
                "the budget hold of a model call that was not paid could not be removed (%s); it expires "
                "in %d s",
                exc,
                int(self.hold_seconds),
            )

    def _cost(self, call: Call, tokens: int) -> float | None:
        # No model yet (a check before a middleware's first call): the cost is unknown, and not warned of.
        return self.prices.cost(call.model, tokens, 0) if call.model else None

    def _fit(
        self,
        breach: BudgetExceededError,
        call: Call,
        spent: Mapping[Scope, Totals],
        budgets: Budgets,
        *,
        quiet: bool = False,
    ) -> tuple[list[BaseMessage], Estimate]:
        """budget_action ``compact``: the newest messages of the call that keep it within every budget
        (:mod:`remem.usage._breach`) and their estimate; raises when not even the latest user message fits."""
        room = fitting_tokens(budgets, spent, self.prices.price(call.model)) - call.head
        fitted = fit_messages(call.messages, room, call.fit_count, quiet=quiet)
        if fitted is None:
            raise cannot_fit(breach) from breach
        estimate = self.estimate(call, call.count(fitted))
        check(budgets, tokens=estimate.input_tokens, cost=estimate.cost, spent=spent, estimated=True)
        return fitted, estimate

    # -- after the call ----------------------------------------------------------------------------
    def event(
        self,
        decision: Decision,
        reply: BaseMessage,
        *,
        sent: Sequence[BaseMessage],
        started: float | None,
        node: str,
    ) -> UsageEvent:
        """The priced event of the call ``decision`` let through and that answered ``reply``: the
        provider's numbers, else ``sent`` counted as the estimate counted it (tool schemas included)."""
        call = decision.call
        counted: int | Callable[[], int] = (
            decision.estimate.input_tokens
            if decision.estimate is not None
            else lambda: call.count(decision.messages)  # counted only when the reply has no usage
        )
        reply_id = getattr(reply, "id", None)
        return self.meter.reply_event(
            "chat",
            call.model,
            sent,
            reply,
            started=started,
            counted_input=counted,
            thread_id=call.thread_id,
            user_id=call.user_id,
            turn=call.turn,
            node=node,
            call_id=call_id_of(call.thread_id, reply_id),
        )

    def keep(self, event: UsageEvent, hold: str | None = None) -> list[dict[str, Any]]:
        """Record a paid call (settling its ``hold``); when the ledger refuses it, the row to keep in the
        state with the reply."""
        if hold is not None and self._renewals is not None:
            self._renewals.stop(hold)
        return [] if self.ledger is None else record_or_keep(self.ledger, event, hold)

    def after(self, decision: Decision, event: UsageEvent | None) -> list[dict[str, Any]] | None:
        """Record the paid call (settling its hold) and check it; the state's kept rows when they change
        (else None). ``event`` None: the call gave no reply to record, and its hold is released.

        A breach that only the provider's numbers show is logged, not raised (the module's rule): the
        reply it paid for is kept, and the next call's check counts it."""
        if event is None:
            self.release(decision)
            return [] if decision.flushed else None
        kept = self.keep(event, decision.hold)
        try:
            check(
                decision.budgets, tokens=event.tokens, cost=event.cost, spent=decision.spent, estimated=False
            )
        except BudgetExceededError as exc:
            log.warning(
                "%s; the reply was kept (it was paid for), and the next model call meets the budget", exc
            )
        return kept if kept or decision.flushed else None
