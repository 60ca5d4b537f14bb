"""The I/O half of compaction, shared by the middleware and the StateGraph node.

It persists new turns to the thread (each once, even when the caller sends the whole list again), decides
whether a model call passes the trigger, and builds the card message. Sync and async methods run the same
pure steps from ``_compaction``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.config import get_config

from remem.errors import NotFoundError, RememUsageError
from remem.memory import CARD_MESSAGE_NAME, ContextCard, Memory, Thread
from remem.messages import TokenCounter, mark_derived
from remem.middleware._compaction import (
    PLACEHOLDER_CARD,
    CompactionPlan,
    check_settings,
    latest_question,
    persistable,
    plan_compaction,
    prompt_tokens,
    with_recall,
)

__all__ = ["Compactor"]


class Compactor:
    """Persistence, trigger and card building for one memory (one thread, or the run's thread id)."""

    def __init__(
        self,
        memory: Memory,
        *,
        thread_id: str | None,
        user_id: str | None,
        agent_id: str | None,
        compaction_token_trigger: int,
        kept_message_count: int,
        pattern: str,
        card_token_budget: int,
        max_relevant_results: int | None,
        token_counter: TokenCounter | None,
        context_summary_update_frequency: int | None,
        recall_results: int = 0,
        recall_token_budget: int = 400,
    ) -> None:
        check_settings(compaction_token_trigger, kept_message_count, pattern)
        self.memory = memory
        self.thread_id = thread_id
        self.user_id = user_id
        self.agent_id = agent_id
        self.trigger = compaction_token_trigger
        self.kept = kept_message_count
        self.pattern = pattern
        self.card_token_budget = card_token_budget
        self.max_relevant_results = max_relevant_results
        self.count: TokenCounter = token_counter or memory.token_counter
        self.frequency = context_summary_update_frequency
        if recall_results < 0:
            raise RememUsageError("recall_results must be non-negative (0: no per-turn recall)")
        self.recall_results = recall_results
        self.recall_token_budget = recall_token_budget
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
        for message in messages:
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
