"""A thread of the memory client (:class:`remem.memory.Memory`): its messages, summaries, context cards and
recall, each run as a plan of the memory client under the thread's lease."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from remem.jobs import enqueue_embedding
from remem.memory._args import check_ids
from remem.memory._card import ContextCard, Recall
from remem.memory._effects import Flow
from remem.memory._plans import (
    add_messages_plan,
    list_messages_plan,
    message_page_plan,
    summaries_plan,
    summary_plan,
    thread_info_plan,
)
from remem.memory._records import StoredMessage, Summary, ThreadInfo
from remem.memory._search import context_card_plan, recall_plan

if TYPE_CHECKING:
    from remem.memory.client import Memory

__all__ = ["DEFAULT_CARD_TOKEN_BUDGET", "Thread"]

DEFAULT_CARD_TOKEN_BUDGET = 1500


def index_fields(memory: Memory) -> Sequence[str]:
    """What the search index holds of a new message (none: a worker embeds and indexes the new turns,
    embed_turns)."""
    return () if memory.embed_queue is not None else memory._message_fields


class Thread:
    """One conversation thread: its raw messages, its summary revisions and its context cards."""

    def __init__(self, memory: Memory, info: ThreadInfo) -> None:
        self.memory = memory
        self.thread_id = info.thread_id
        self.user_id = info.user_id
        self.agent_id = info.agent_id

    def __repr__(self) -> str:
        return f"Thread({self.thread_id!r}, user_id={self.user_id!r}, agent_id={self.agent_id!r})"

    def info(self) -> ThreadInfo:
        """The thread's metadata as stored now (message count, summary revision ...)."""
        info: ThreadInfo = self.memory._run(thread_info_plan(self.thread_id))
        return info

    async def ainfo(self) -> ThreadInfo:
        """Async version of :meth:`info`."""
        info: ThreadInfo = await self.memory._arun(thread_info_plan(self.thread_id))
        return info

    def add_messages(self, messages: Sequence[Any]) -> list[StoredMessage]:
        """Append messages: dicts (``role``, ``content``, optional ``id``, ``timestamp``, ``metadata``) or
        LangChain messages. The caller's ids are kept; a message whose id is already in the thread is not
        stored again, so sending the same list twice (a retry) stores each message once. Returns every
        message as stored, in the order given (one sent before comes back with its first ``seq``).
        Messages remem derived from memory (cards, recalls, summaries: :func:`remem.messages.is_derived`)
        are not turns and are skipped.

        The append holds the thread's lease: appends from any number of processes take turns, and one
        that waits past ``thread_lease_timeout`` raises :class:`~remem.errors.ThreadBusyError`."""
        stored: list[StoredMessage] = self.memory._run(
            add_messages_plan(self.thread_id, messages, self._fields(), self.memory._fold)
        )
        self._queue_embedding(stored)
        return stored

    def _fields(self) -> Sequence[str]:
        return index_fields(self.memory)

    def _queue_embedding(self, stored: Sequence[StoredMessage]) -> None:
        if (queue := self.memory.embed_queue) is not None and stored:
            enqueue_embedding(queue, self.thread_id, [m.id for m in stored], user_id=self.user_id)

    async def aadd_messages(self, messages: Sequence[Any]) -> list[StoredMessage]:
        """Async version of :meth:`add_messages`."""
        stored: list[StoredMessage] = await self.memory._arun(
            add_messages_plan(self.thread_id, messages, self._fields(), self.memory._fold)
        )
        if self.memory.embed_queue is not None:
            await asyncio.to_thread(self._queue_embedding, stored)
        return stored

    def messages(self, last: int | None = None) -> list[StoredMessage]:
        """The thread's messages in order (only the last ``last`` when given)."""
        found: list[StoredMessage] = self.memory._run(list_messages_plan(self.thread_id, last))
        return found

    async def amessages(self, last: int | None = None) -> list[StoredMessage]:
        """Async version of :meth:`messages`."""
        found: list[StoredMessage] = await self.memory._arun(list_messages_plan(self.thread_id, last))
        return found

    def message_page(self, offset: int = 0, limit: int = 100) -> tuple[list[StoredMessage], int]:
        """``limit`` messages from position ``offset`` and how many the thread holds. Reads only the page
        (the thread's metadata, the order chunks that hold it, its messages), however long the thread is."""
        page: tuple[list[StoredMessage], int] = self.memory._run(
            message_page_plan(self.thread_id, offset, limit)
        )
        return page

    async def amessage_page(self, offset: int = 0, limit: int = 100) -> tuple[list[StoredMessage], int]:
        """Async version of :meth:`message_page`."""
        page: tuple[list[StoredMessage], int] = await self.memory._arun(
            message_page_plan(self.thread_id, offset, limit)
        )
        return page

    def get_summary(self, except_last: int = 0, token_budget: int = 1000) -> Summary:
        """The summary of every message but the last ``except_last``, extended first if needed.

        It is extended from its coverage watermark (only new messages are summarised) and saved as a new
        revision; earlier revisions are kept. Past ``token_budget`` the text is cut and ends "(truncated)".
        """
        summary: Summary = self.memory._run(
            summary_plan(self.thread_id, except_last, token_budget, self.memory.count_text, self.memory._fold)
        )
        return summary

    async def aget_summary(self, except_last: int = 0, token_budget: int = 1000) -> Summary:
        """Async version of :meth:`get_summary`."""
        summary: Summary = await self.memory._arun(
            summary_plan(self.thread_id, except_last, token_budget, self.memory.count_text, self.memory._fold)
        )
        return summary

    def summaries(self) -> list[Summary]:
        """Every summary revision kept for this thread, oldest first (each with what it covers)."""
        found: list[Summary] = self.memory._run(summaries_plan(self.thread_id))
        return found

    async def asummaries(self) -> list[Summary]:
        """Async version of :meth:`summaries`."""
        found: list[Summary] = await self.memory._arun(summaries_plan(self.thread_id))
        return found

    def _card_plan(self, **kwargs: Any) -> Flow[ContextCard]:
        return context_card_plan(
            self.thread_id, count=self.memory.count_text, fold=self.memory._fold, **kwargs
        )

    def get_context_card(
        self,
        except_last_messages: int = 0,
        max_recent_messages: int = 0,
        max_relevant_results: int | None = None,
        token_budget: int = DEFAULT_CARD_TOKEN_BUDGET,
        types: Sequence[str] | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        query: str | None = None,
    ) -> ContextCard:
        """The thread's context card: topics, summary, relevant information and recent messages.

        External tail: ``get_context_card(except_last_messages=N, max_recent_messages=0)`` and send the
        last N raw messages after the card. Self-contained: ``max_recent_messages=N`` too; the card holds
        the tail. Relevant information is searched with the latest user message (or ``query``) over the
        thread's earlier messages (never the excluded tail) and the user's long-term memories, filtered by
        ``types`` and ``metadata_filter``. The card fits ``token_budget``; with nothing to say it is "".
        """
        card: ContextCard = self.memory._run(
            self._card_plan(
                except_last_messages=except_last_messages,
                max_recent_messages=max_recent_messages,
                max_relevant_results=max_relevant_results,
                token_budget=token_budget,
                types=types,
                metadata_filter=metadata_filter,
                query=query,
            )
        )
        return card

    async def aget_context_card(
        self,
        except_last_messages: int = 0,
        max_recent_messages: int = 0,
        max_relevant_results: int | None = None,
        token_budget: int = DEFAULT_CARD_TOKEN_BUDGET,
        types: Sequence[str] | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        query: str | None = None,
    ) -> ContextCard:
        """Async version of :meth:`get_context_card`."""
        card: ContextCard = await self.memory._arun(
            self._card_plan(
                except_last_messages=except_last_messages,
                max_recent_messages=max_recent_messages,
                max_relevant_results=max_relevant_results,
                token_budget=token_budget,
                types=types,
                metadata_filter=metadata_filter,
                query=query,
            )
        )
        return card

    def preview_context_card(
        self,
        except_last_messages: int = 0,
        max_recent_messages: int = 0,
        max_relevant_results: int | None = None,
        token_budget: int = DEFAULT_CARD_TOKEN_BUDGET,
        types: Sequence[str] | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        query: str | None = None,
    ) -> ContextCard:
        """The card :meth:`get_context_card` would build now, built without writing anything (for an
        inspector: reads never write). Its summary is the newest stored revision that fits, where
        :meth:`get_context_card` first extends it once enough new messages wait (a new revision)."""
        card: ContextCard = self.memory._run(
            self._card_plan(
                except_last_messages=except_last_messages,
                max_recent_messages=max_recent_messages,
                max_relevant_results=max_relevant_results,
                token_budget=token_budget,
                types=types,
                metadata_filter=metadata_filter,
                query=query,
                extend_summary=False,
            )
        )
        return card

    async def apreview_context_card(
        self,
        except_last_messages: int = 0,
        max_recent_messages: int = 0,
        max_relevant_results: int | None = None,
        token_budget: int = DEFAULT_CARD_TOKEN_BUDGET,
        types: Sequence[str] | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        query: str | None = None,
    ) -> ContextCard:
        """Async version of :meth:`preview_context_card`."""
        card: ContextCard = await self.memory._arun(
            self._card_plan(
                except_last_messages=except_last_messages,
                max_recent_messages=max_recent_messages,
                max_relevant_results=max_relevant_results,
                token_budget=token_budget,
                types=types,
                metadata_filter=metadata_filter,
                query=query,
                extend_summary=False,
            )
        )
        return card

    def recall(
        self,
        query: str,
        k: int = 3,
        *,
        exclude_ids: Sequence[str] = (),
        types: Sequence[str] | None = None,
        token_budget: int = 400,
    ) -> Recall:
        """The ``k`` records best matching ``query`` (this thread's messages, its user's memories), leaving
        out ``exclude_ids`` (what the model already sees), as an escaped ``<recalled_memory>`` block."""
        recall: Recall = self.memory._run(self._recall_plan(query, k, exclude_ids, types, token_budget))
        return recall

    async def arecall(
        self,
        query: str,
        k: int = 3,
        *,
        exclude_ids: Sequence[str] = (),
        types: Sequence[str] | None = None,
        token_budget: int = 400,
    ) -> Recall:
        """Async version of :meth:`recall`."""
        recall: Recall = await self.memory._arun(
            self._recall_plan(query, k, exclude_ids, types, token_budget)
        )
        return recall

    def _recall_plan(
        self, query: str, k: int, exclude_ids: Sequence[str], types: Sequence[str] | None, token_budget: int
    ) -> Flow[Recall]:
        return recall_plan(
            self.thread_id,
            query,
            k=k,
            exclude=check_ids(exclude_ids, "exclude_ids"),
            types=types,
            token_budget=token_budget,
            count=self.memory.count_text,
        )
