"""Compaction with a context card: a LangChain v1 ``AgentMiddleware`` and a plain LangGraph node.

    >>> from langchain.agents import create_agent
    >>> from remem import Memory
    >>> from remem.middleware import ContextCardMiddleware
    >>> memory = Memory.from_url("sqlite:///memory.db")
    >>> agent = create_agent(model, tools=[...], middleware=[
    ...     ContextCardMiddleware(memory, thread_id="t1", user_id="maya",
    ...                           compaction_token_trigger=6000, kept_message_count=3)])

Each user message and assistant reply is persisted to the thread once (the card message never is).
When a model call's prompt (system prompt + tool schemas + messages, the card left out) reaches
``compaction_token_trigger``, the history is replaced by a context card plus a raw tail:

- ``"external_tail"``: ``[card, *last raw messages]``, the card built with ``except_last_messages=N``;
  the card stays unchanged across the following turns, so a provider's prompt cache keeps working;
- ``"self_contained"``: ``[card]`` whose ``<recent_messages>`` hold the tail.

The tail starts at a safe point (a tool call and its results are never separated) and always holds the
latest user message. Unlike LangChain's ``SummarizationMiddleware`` (langchain#34664), the trigger counts
the system prompt and the tool schemas, which are sent with every call. ``recall_results`` adds per-turn
recall between compactions (see :class:`ContextCardMiddleware`).

One writer per thread: every append to the remem thread holds that thread's lease, so concurrent runs
never lose or renumber each other's messages. A checkpointed agent's own history is read by LangGraph
before the first middleware hook runs, and no hook runs when a run fails, so a middleware cannot hold the
thread's lease over a whole run. remem's savers close that gap themselves: a run that loaded the thread's
latest checkpoint may only extend it, so of two bare ``agent.invoke`` calls on one thread at once, a
checkpoint of the one whose start the other overtook is refused with :class:`~remem.ThreadBusyError`
(never a silent fork; time travel and ``update_state`` fork as in stock LangGraph). On a remem saver each
model call of a bare run also claims the thread (:mod:`remem.checkpoint._claims`): it waits until the
checkpoint it runs from is written, takes the thread's lease, checks that checkpoint is still the head, and
the lease is given back once the checkpoint after the call is written. An overtaken run so stops before its
model call (nothing paid), and turns are stored to the remem thread only from written checkpoints: the
question once the call is claimed, the reply once its checkpoint is written. Such a run fails, and
if it was refused after its input was stored, its question stays in the thread without a reply. To have a
second turn wait instead (up to ``thread_lease_timeout``), send turns with :func:`remem.run_turn`
(``run_turn(agent, thread_id, message)``). A stock saver gives bare invokes no such protection.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Unpack, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command

from remem.memory import Memory
from remem.middleware._compaction import CardOptions, CompactionPlan, Compactor, RecallCardOptions

__all__ = ["ContextCardMiddleware", "ContextCardNode"]


def _as_any(messages: list[BaseMessage]) -> list[AnyMessage]:
    return cast("list[AnyMessage]", messages)


def _with_ids(response: ModelResponse[Any]) -> ModelResponse[Any]:
    # The reply is written to the state twice (the model's own update, then the compacted history);
    # an id makes both writes the same message.
    for message in response.result:
        if message.id is None:
            message.id = f"run-{uuid.uuid4()}"
    return response


def _compacted(
    response: ModelResponse[Any], card: HumanMessage, plan: CompactionPlan
) -> ExtendedModelResponse[Any]:
    history: list[BaseMessage] = [*plan.system, card, *plan.after_card, *_with_ids(response).result]
    update = {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *history]}
    return ExtendedModelResponse(model_response=response, command=Command(update=update))


class ContextCardMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Persist an agent's turns to a remem thread and compact its prompt with a context card.

    The options, each with its default, are :class:`~remem.middleware.RecallCardOptions`'s (written once, for
    the node too): ``thread_id`` may be left out (the run's ``configurable.thread_id`` is used),
    ``card_token_budget`` bounds the card, ``max_relevant_results`` caps the records it recalls. See the
    module docstring for the two patterns.

    ``recall_results`` > 0 adds per-turn recall: on calls that do not compact, the records best matching
    the latest user message and not already in the prompt are sent in a ``memory_recall`` user message
    right after it (at most ``recall_token_budget`` tokens). It is never stored in the state, and the
    prompt before it is unchanged, so the card stays cached while recall follows each new question.
    """

    def __init__(self, memory: Memory, **options: Unpack[RecallCardOptions]) -> None:
        super().__init__()
        self.compactor = Compactor(memory, options, owner="ContextCardMiddleware")

    # A bare run on a remem saver claims the thread in wrap_model_call and stores its turns there and
    # after the model, from written checkpoints only (see the module docstring); other runs store here.

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        if not self.compactor.mirrors_accepted():
            self.compactor.persist(state["messages"])
        return None

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        if not self.compactor.mirrors_accepted():
            await self.compactor.apersist(state["messages"])
        return None

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.compactor.persist_written(state["messages"])
        return None

    async def aafter_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        await self.compactor.apersist_written(state["messages"])
        return None

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        claim = self.compactor.claim(request.state["messages"])
        try:
            response = self._call(request, handler)
        except BaseException:
            self.compactor.settle(claim, failed=True)
            raise
        self.compactor.settle(claim, failed=False)
        return response

    def _call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        plan = self.compactor.plan(request.messages, request.system_message, request.tools)
        if plan is None:
            recalled = self.compactor.with_recall(request.messages)
            return handler(request if recalled is None else request.override(messages=_as_any(recalled)))
        card = self.compactor.build_card(plan)
        response = handler(request.override(messages=_as_any([card, *plan.after_card])))
        return _compacted(response, card, plan)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        claim = await self.compactor.aclaim(request.state["messages"])
        try:
            response = await self._acall(request, handler)
        except BaseException:
            await asyncio.to_thread(self.compactor.settle, claim, failed=True)
            raise
        self.compactor.settle(claim, failed=False)
        return response

    async def _acall(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        plan = self.compactor.plan(request.messages, request.system_message, request.tools)
        if plan is None:
            recalled = await self.compactor.awith_recall(request.messages)
            return await handler(
                request if recalled is None else request.override(messages=_as_any(recalled))
            )
        card = await self.compactor.abuild_card(plan)
        response = await handler(request.override(messages=_as_any([card, *plan.after_card])))
        return _compacted(response, card, plan)


class ContextCardNode:
    """The same capability as a node of your own ``StateGraph`` (a state with a ``messages`` key).

    Add it before the model node: ``builder.add_node("memory", ContextCardNode(memory, ...))`` (or
    ``node.acall`` in an async graph). It persists new turns and, past the trigger, returns the compacted
    history ``[card, *tail]``. Pass the model's ``system_prompt`` and ``tools`` so they count toward the
    trigger; the other options are :class:`~remem.middleware.CardOptions`. A reply is persisted by the next call; :meth:`record` persists without compacting.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        system_prompt: str | None = None,
        tools: Sequence[Any] = (),
        **options: Unpack[CardOptions],
    ) -> None:
        from langchain_core.messages import SystemMessage

        self.compactor = Compactor(memory, options, accepted=CardOptions, owner="ContextCardNode")
        self.system = SystemMessage(content=system_prompt) if system_prompt else None
        self.tools = list(tools)

    @staticmethod
    def _update(card: HumanMessage, plan: CompactionPlan) -> dict[str, Any]:
        history = [*plan.system, card, *plan.after_card]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *history]}

    def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        # A bare run claims the thread for this step as the middleware does for a model call: a run
        # overtaken stops here with ThreadBusyError, before its turn is stored or a card is paid for.
        messages = state["messages"]
        claim = self.compactor.claim(messages)
        try:
            if claim is None:
                self.compactor.persist(messages)
            plan = self.compactor.plan(messages, self.system, self.tools)
            update = {} if plan is None else self._update(self.compactor.build_card(plan), plan)
        except BaseException:
            self.compactor.settle(claim, failed=True)
            raise
        self.compactor.settle(claim, failed=False)
        return update

    async def acall(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Async version of :meth:`__call__`."""
        messages = state["messages"]
        claim = await self.compactor.aclaim(messages)
        try:
            if claim is None:
                await self.compactor.apersist(messages)
            plan = self.compactor.plan(messages, self.system, self.tools)
            update = {} if plan is None else self._update(await self.compactor.abuild_card(plan), plan)
        except BaseException:
            await asyncio.to_thread(self.compactor.settle, claim, failed=True)
            raise
        self.compactor.settle(claim, failed=False)
        return update

    def record(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Persist new turns only (e.g. as a node after the model)."""
        self.compactor.persist(state["messages"])
        return {}

    async def arecord(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Async version of :meth:`record`."""
        await self.compactor.apersist(state["messages"])
        return {}
