"""Compaction with context cards, shared by ``ContextCardMiddleware`` and ``ContextCardNode``.

The pure half decides when and where to compact (no store, no model):

- Which messages are turns worth persisting (user messages, and assistant replies that call no tool).
- How many tokens a model call will take: the system prompt and the tool schemas count, as well as the
  messages (LangChain's ``SummarizationMiddleware`` counts the messages only, langchain#34664). The card
  message itself is left out of both persistence and the count.
- Where the raw tail starts: never on a tool result (a tool call and its results stay together), and never
  after the latest user message (the question being answered is always sent).

The I/O half, :class:`Compactor`, persists new turns to the thread (each once, even when the caller sends
the whole list again), decides whether a model call passes the trigger and builds the card message; its
sync and async methods run the same pure steps.
"""

from __future__ import annotations

import asyncio
import difflib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.config import get_config

from remem._lease import DEFAULT_LEASE_TIMEOUT
from remem.checkpoint._base import RememSaver
from remem.checkpoint._claims import Claim
from remem.errors import ArgumentTypeError, NotFoundError, RememUsageError
from remem.memory import CARD_MESSAGE_NAME, DEFAULT_CARD_TOKEN_BUDGET, ContextCard, Memory, Thread
from remem.messages import (
    TokenCounter,
    is_derived,
    last_human_index,
    mark_derived,
    persistable,
    retried_copy,
    safe_cut_at_or_before,
    system_prefix_length,
    tool_schema_text,
)

__all__ = [
    "PATTERNS",
    "PLACEHOLDER_CARD",
    "CardOptions",
    "CompactionPlan",
    "Compactor",
    "Pattern",
    "RecallCardOptions",
    "latest_question",
    "organic_messages",
    "plan_compaction",
    "prompt_tokens",
    "with_recall",
]

Pattern = Literal["external_tail", "self_contained"]
PATTERNS: tuple[str, ...] = ("external_tail", "self_contained")
PLACEHOLDER_CARD = "<context_card>\n<note>No earlier context yet.</note>\n</context_card>"


class CardOptions(TypedDict, total=False):
    """The options ``ContextCardMiddleware`` and ``ContextCardNode`` share, written once; every one may be
    left out (its default in brackets).

    - ``thread_id`` (None: the run's ``configurable.thread_id``), ``user_id``, ``agent_id`` (None).
    - ``compaction_token_trigger`` (6000): the prompt size (system prompt, tool schemas and messages) that
      calls for a card.
    - ``kept_message_count`` (3): raw messages kept after the card.
    - ``pattern`` (``"external_tail"``): see :mod:`remem.middleware.card`.
    - ``card_token_budget`` (``DEFAULT_CARD_TOKEN_BUDGET``): bounds the card.
    - ``max_relevant_results`` (None: as many as fill the budget): caps the records the card recalls.
    - ``token_counter`` (None: the memory's).
    - ``context_summary_update_frequency`` (None: the thread's default).
    """

    thread_id: str | None
    user_id: str | None
    agent_id: str | None
    compaction_token_trigger: int
    kept_message_count: int
    pattern: Pattern
    card_token_budget: int
    max_relevant_results: int | None
    token_counter: TokenCounter | None
    context_summary_update_frequency: int | None


class RecallCardOptions(CardOptions, total=False):
    """``CardOptions`` and per-turn recall, which only the middleware does: ``recall_results`` (0: none),
    ``recall_token_budget`` (400)."""

    recall_results: int
    recall_token_budget: int


_DEFAULTS: RecallCardOptions = {
    "thread_id": None,
    "user_id": None,
    "agent_id": None,
    "compaction_token_trigger": 6000,
    "kept_message_count": 3,
    "pattern": "external_tail",
    "card_token_budget": DEFAULT_CARD_TOKEN_BUDGET,
    "max_relevant_results": None,
    "token_counter": None,
    "context_summary_update_frequency": None,
    "recall_results": 0,
    "recall_token_budget": 400,
}


def _checked(options: Mapping[str, Any], accepted: type[CardOptions], owner: str) -> RecallCardOptions:
    """``options`` over the defaults; a name ``accepted`` does not have is refused as a signature would."""
    known = sorted(accepted.__annotations__)
    for name in options:
        if name in RecallCardOptions.__annotations__ and name not in known:
            raise ArgumentTypeError(
                f"{owner} does no per-turn recall: {name} is ContextCardMiddleware's option"
            )
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; it takes {', '.join(known)}"
            raise ArgumentTypeError(f"{owner} got an unexpected keyword argument {name!r}{hint}")
    merged: dict[str, Any] = {**_DEFAULTS, **options}
    if merged["compaction_token_trigger"] <= 0:
        raise RememUsageError(
            "compaction_token_trigger must be positive: the prompt size that calls for a card"
        )
    if merged["kept_message_count"] < 0:
        raise RememUsageError("kept_message_count must be non-negative (raw messages kept after the card)")
    if merged["pattern"] not in PATTERNS:
        raise RememUsageError(f"pattern must be one of {', '.join(PATTERNS)}; got {merged['pattern']!r}")
    if merged["recall_results"] < 0:
        raise RememUsageError("recall_results must be non-negative (0: no per-turn recall)")
    return merged  # type: ignore[return-value]


def organic_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The conversation without the derived messages (cards, recalls, summaries) remem injected."""
    return [m for m in messages if not is_derived(m)]


def prompt_tokens(
    messages: Sequence[BaseMessage],
    *,
    system: SystemMessage | None,
    tools: Sequence[Any],
    count: TokenCounter,
) -> int:
    """Tokens of a model call: system prompt + tool schemas + the organic messages (no card)."""
    counted: list[BaseMessage] = [] if system is None else [system]
    counted += organic_messages(messages)
    schema = tool_schema_text(tools)
    if schema:
        counted.append(SystemMessage(content=schema))
    return count(counted)


@dataclass(frozen=True)
class CompactionPlan:
    """How to compact: the card covers all but the last ``except_last`` stored turns.

    The compacted history is ``[*system, card, *after_card]``. ``max_recent`` is 0 for the external tail
    (``after_card`` is the raw tail) and ``except_last`` for the self-contained card, which holds the
    tail's turns (``after_card`` is then only a trailing tool exchange still waiting for the model).
    """

    except_last: int
    max_recent: int
    system: tuple[BaseMessage, ...]
    after_card: tuple[BaseMessage, ...]
    tail: tuple[BaseMessage, ...]


def plan_compaction(messages: Sequence[BaseMessage], kept: int, pattern: str) -> CompactionPlan | None:
    """Where to cut the organic ``messages``; None when nothing would be left for the card to cover."""
    raw = organic_messages(messages)
    prefix = system_prefix_length(raw)
    system, body = tuple(raw[:prefix]), raw[prefix:]
    start = safe_cut_at_or_before(body, len(body) - kept)
    question = last_human_index(body)
    if question is not None:
        start = min(start, question)  # the latest user message is never folded away
    if start <= 0:
        return None
    tail = tuple(body[start:])
    stored = [i for i, m in enumerate(tail) if persistable(m) is not None]
    if pattern == "external_tail":
        return CompactionPlan(len(stored), 0, system, after_card=tail, tail=tail)
    rest = stored[-1] + 1 if stored else 0
    return CompactionPlan(len(stored), len(stored), system, after_card=tail[rest:], tail=tail)


def with_recall(messages: Sequence[BaseMessage], recall: BaseMessage) -> list[BaseMessage]:
    """``messages`` with ``recall`` right after the latest user message (the prefix before it is unchanged,
    so a provider's prompt cache still holds)."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        if isinstance(out[i], HumanMessage) and not is_derived(out[i]):
            out.insert(i + 1, recall)
            return out
    out.append(recall)
    return out


def latest_question(messages: Sequence[BaseMessage]) -> str | None:
    """The text of the latest user message (not a derived one), if any."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) and not is_derived(message) and message.text.strip():
            return message.text
    return None


class Compactor:
    """Persistence, trigger and card building for one memory (one thread, or the run's thread id)."""

    def __init__(
        self,
        memory: Memory,
        options: Mapping[str, Any],
        *,
        accepted: type[CardOptions] = RecallCardOptions,
        owner: str = "Compactor",
    ) -> None:
        checked = _checked(options, accepted, owner)
        self.memory = memory
        self.thread_id = checked["thread_id"]
        self.user_id = checked["user_id"]
        self.agent_id = checked["agent_id"]
        self.trigger = checked["compaction_token_trigger"]
        self.kept = checked["kept_message_count"]
        self.pattern = checked["pattern"]
        self.card_token_budget = checked["card_token_budget"]
        self.max_relevant_results = checked["max_relevant_results"]
        self.count: TokenCounter = checked["token_counter"] or memory.token_counter
        self.frequency = checked["context_summary_update_frequency"]
        self.recall_results = checked["recall_results"]
        self.recall_token_budget = checked["recall_token_budget"]
        self._threads: dict[str, Thread] = {}
        self._persisted: dict[str, set[str]] = {}

    def current_thread_id(self) -> str:
        if self.thread_id:
            return self.thread_id
        try:
            configurable = get_config().get("configurable", {})
        except RuntimeError:
            configurable = {}
        thread_id = configurable.get("thread_id")
        if not thread_id:
            raise RememUsageError(
                "the context card needs a thread: pass thread_id=... or invoke with "
                "config={'configurable': {'thread_id': ...}}"
            )
        return str(thread_id)

    def _open_kwargs(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "context_summary_update_frequency": self.frequency,
        }

    def thread(self) -> Thread:
        thread_id = self.current_thread_id()
        if thread_id not in self._threads:
            self._threads[thread_id] = self.memory.thread(thread_id, **self._open_kwargs())
        return self._threads[thread_id]

    async def athread(self) -> Thread:
        """Async version of :meth:`thread`."""
        thread_id = self.current_thread_id()
        if thread_id not in self._threads:
            self._threads[thread_id] = await self.memory.athread(thread_id, **self._open_kwargs())
        return self._threads[thread_id]

    def _new_turns(self, thread_id: str, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        seen = self._persisted.setdefault(thread_id, set())
        turns: dict[str, dict[str, Any]] = {}
        copy = retried_copy(messages)  # the same message sent again after a failure: stored once
        for message in messages if copy is None else messages[:-1]:
            turn = persistable(message)
            if turn is not None and turn["id"] not in seen:
                turns.setdefault(turn["id"], turn)
        return list(turns.values())

    def persist(self, messages: Sequence[BaseMessage]) -> None:
        """Store the turns of ``messages`` this thread does not hold yet.

        A thread forgotten since it was opened (``remem forget``, in any process) is opened anew for what
        is said from now on; the turns this compactor had stored stay forgotten (never sent again)."""
        thread = self.thread()
        turns = self._new_turns(thread.thread_id, messages)
        if turns:
            try:
                thread.add_messages(turns)  # skips ids the store already holds (another process, a restart)
            except NotFoundError:
                del self._threads[thread.thread_id]
                self.thread().add_messages(turns)
            self._persisted[thread.thread_id].update(t["id"] for t in turns)

    async def apersist(self, messages: Sequence[BaseMessage]) -> None:
        """Async version of :meth:`persist`."""
        thread = await self.athread()
        turns = self._new_turns(thread.thread_id, messages)
        if turns:
            try:
                await thread.aadd_messages(turns)
            except NotFoundError:
                del self._threads[thread.thread_id]
                await (await self.athread()).aadd_messages(turns)
            self._persisted[thread.thread_id].update(t["id"] for t in turns)

    @staticmethod
    def _run_saver() -> tuple[RememSaver, Any] | None:
        """The run's remem saver and the task's config, when a remem saver checkpoints the run."""
        try:
            config = get_config()
        except RuntimeError:
            return None
        saver = (config.get("configurable") or {}).get("__pregel_checkpointer")
        return (saver, config) if isinstance(saver, RememSaver) else None

    def mirrors_accepted(self) -> bool:
        """Whether this run's model calls claim the thread (:mod:`remem.checkpoint._claims`): then turns
        are mirrored only from checkpoints the saver accepted, never from a run that was refused."""
        found = self._run_saver()
        return found is not None and found[0]._claim_spot(found[1]) is not None

    def claim(self, messages: Sequence[BaseMessage]) -> Claim | None:
        """Claim the thread for this model call (raising ThreadBusyError, before the call, for a run that
        was overtaken), then store the turns of the checkpoint the call runs from; None when the run does
        not claim (its turns are stored as they come)."""
        found = self._run_saver()
        claim = found[0].claim_model_call(found[1]) if found is not None else None
        if claim is not None:
            try:
                self.persist(messages)
            except BaseException:
                claim.withdraw()
                raise
        return claim

    async def aclaim(self, messages: Sequence[BaseMessage]) -> Claim | None:
        """Async version of :meth:`claim`."""
        found = self._run_saver()
        claim = await found[0].aclaim_model_call(found[1]) if found is not None else None
        if claim is not None:
            try:
                await self.apersist(messages)
            except BaseException:
                await asyncio.to_thread(claim.withdraw)
                raise
        return claim

    @staticmethod
    def settle(claim: Claim | None, *, failed: bool) -> None:
        """After the claimed call: a failed call gives the claim back; else the put of the checkpoint after
        the call takes it, or it is given back after the lease timeout."""
        if claim is None:
            return
        if failed:
            claim.withdraw()
        else:
            claim.expire(DEFAULT_LEASE_TIMEOUT)

    def persist_written(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`persist` after a model call: for a run that claims, once the checkpoint holding the reply
        is written (so a reply is mirrored only when the saver accepted it)."""
        found = self._run_saver()
        if found is not None:
            found[0].wait_written(found[1])
        self.persist(messages)

    async def apersist_written(self, messages: Sequence[BaseMessage]) -> None:
        """Async version of :meth:`persist_written`."""
        found = self._run_saver()
        if found is not None:
            await asyncio.to_thread(found[0].wait_written, found[1])
        await self.apersist(messages)

    def plan(
        self, messages: Sequence[BaseMessage], system: SystemMessage | None, tools: Sequence[Any]
    ) -> CompactionPlan | None:
        """The compaction to do before this model call, or None when the prompt is under the trigger."""
        if prompt_tokens(messages, system=system, tools=tools, count=self.count) < self.trigger:
            return None
        return plan_compaction(messages, self.kept, self.pattern)

    def _card_kwargs(self, plan: CompactionPlan) -> dict[str, Any]:
        return {
            "except_last_messages": plan.except_last,
            "max_recent_messages": plan.max_recent,
            "max_relevant_results": self.max_relevant_results,
            "token_budget": self.card_token_budget,
        }

    @staticmethod
    def card_message(card: ContextCard) -> HumanMessage:
        """The card as a user-role message (never the system role), marked derived: never persisted."""
        message = HumanMessage(
            content=card.content or PLACEHOLDER_CARD, name=CARD_MESSAGE_NAME, id=f"remem-card-{uuid.uuid4()}"
        )
        return mark_derived(message, source="card")

    def build_card(self, plan: CompactionPlan) -> HumanMessage:
        return self.card_message(self.thread().get_context_card(**self._card_kwargs(plan)))

    async def abuild_card(self, plan: CompactionPlan) -> HumanMessage:
        """Async version of :meth:`build_card`."""
        thread = await self.athread()
        return self.card_message(await thread.aget_context_card(**self._card_kwargs(plan)))

    def _recall_args(self, messages: Sequence[BaseMessage]) -> tuple[str, list[str]] | None:
        question = latest_question(messages) if self.recall_results else None
        if question is None:
            return None
        return question, [str(m.id) for m in messages if m.id]

    def with_recall(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """``messages`` plus the records recalled for the latest question (None when nothing is recalled)."""
        args = self._recall_args(messages)
        if args is None:
            return None
        recall = self.thread().recall(
            args[0], self.recall_results, exclude_ids=args[1], token_budget=self.recall_token_budget
        )
        return with_recall(messages, recall.to_message()) if recall.content else None

    async def awith_recall(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """Async version of :meth:`with_recall`."""
        args = self._recall_args(messages)
        if args is None:
            return None
        thread = await self.athread()
        recall = await thread.arecall(
            args[0], self.recall_results, exclude_ids=args[1], token_budget=self.recall_token_budget
        )
        return with_recall(messages, recall.to_message()) if recall.content else None
