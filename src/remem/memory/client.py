"""The memory client: threads, their messages, summaries and context cards, and search.

    >>> from remem import Memory
    >>> memory = Memory.from_url("memory://")
    >>> thread = memory.thread("support-42", user_id="maya", agent_id="helper")
    >>> thread.add_messages([{"role": "user", "content": "I'm Maya.", "id": "m1"}])
    >>> card = thread.get_context_card(except_last_messages=3, max_recent_messages=0)

Every method has an async twin (``aadd_messages``, ``aget_context_card``, ``asearch`` ...). The client is
built on a LangGraph ``BaseStore``, so it runs on any store: LangGraph's ``InMemoryStore`` with an index,
or remem's SQLite and PostgreSQL stores (hybrid keyword + vector search). The layout of what it stores is
described in ``remem.memory._records``.

Any number of processes may share one database. Writes to one thread take turns under the thread's
lease (``remem._lease``, held by the store's database): concurrent appends all land, once each, in one
order that every reader sees. A writer that waits longer than ``thread_lease_timeout`` seconds gets a
:class:`~remem.errors.ThreadBusyError` and has written nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage
from langgraph.store.base import BaseStore

from remem._lease import DEFAULT_LEASE_TIMEOUT, ThreadLease, athread_lease, thread_lease
from remem.config import Settings, load_settings
from remem.errors import ArgumentTypeError, ConfigError
from remem.memory._args import check_number, check_text, check_whole
from remem.memory._backends import message_fields
from remem.memory._effects import Flow, arun, run
from remem.memory._plans import (
    FREQUENCY_MEANING,
    FoldSpec,
    delete_memory_plan,
    edit_memory_plan,
    fold_spec,
    open_and_add_plan,
    open_thread_plan,
    thread_info_plan,
)
from remem.memory._records import MemoryRecord, StoredMessage, ThreadInfo, check_label
from remem.memory._search import search_plan, thread_search_plan
from remem.memory._thread import DEFAULT_CARD_TOKEN_BUDGET, Thread, index_fields
from remem.messages import TokenCounter, token_counter
from remem.store._targets import store_lease_target
from remem.summarize import Summarizer, summarizer_for
from remem.usage import Meter, usage_meter

__all__ = ["DEFAULT_CARD_TOKEN_BUDGET", "Memory", "Thread"]

DEFAULT_UPDATE_FREQUENCY = 4


def _check_parts(store: object, summarizer: object, counter: object, meter: object) -> None:
    """Refuse a part of the wrong kind at once (it would fail at the first call, as a storage error)."""
    if not isinstance(store, BaseStore):
        raise ArgumentTypeError(
            f"store takes a LangGraph BaseStore (remem.store's, or InMemoryStore); got {type(store).__name__}; "
            "or open one with Memory.from_url(url)"
        )
    if summarizer is not None and not isinstance(summarizer, Summarizer):
        raise ArgumentTypeError(
            f"summarizer takes a remem Summarizer (summarize and asummarize); got {type(summarizer).__name__}"
        )
    if counter is not None and not callable(counter):
        raise ArgumentTypeError(f"token_counter takes a function of messages to tokens; got {counter!r}")
    if meter is not None and not isinstance(meter, Meter):
        raise ArgumentTypeError(f"meter takes a remem.usage.Meter or None; got {type(meter).__name__}")


class Memory:
    """Threads, summaries, context cards and search over one LangGraph ``BaseStore``.

    ``summarizer`` writes thread summaries (default: the extractive one, no LLM); ``token_counter``
    measures summaries and cards against their budgets; ``context_summary_update_frequency`` is how many
    new messages a thread gathers before its card's summary is extended (a new thread may override it);
    ``thread_lease_timeout`` is how long a write waits for another writer of the same thread;
    ``meter`` (a :class:`remem.usage.Meter`) records each summariser call in the usage ledger
    (:meth:`from_url` records in the memory's own database, embedder batches included).
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        summarizer: Summarizer | None = None,
        token_counter: TokenCounter | None = None,
        context_summary_update_frequency: int = DEFAULT_UPDATE_FREQUENCY,
        thread_lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
        meter: Meter | None = None,
    ) -> None:
        from remem.messages import approximate_token_count

        _check_parts(store, summarizer, token_counter, meter)
        self.store = store
        self.summarizer: Summarizer = summarizer or summarizer_for(None)
        self.token_counter: TokenCounter = token_counter or approximate_token_count
        self.context_summary_update_frequency = check_whole(
            context_summary_update_frequency,
            "context_summary_update_frequency",
            least=1,
            meaning=FREQUENCY_MEANING,
            example=DEFAULT_UPDATE_FREQUENCY,
        )
        self.thread_lease_timeout = check_number(
            thread_lease_timeout,
            "thread_lease_timeout",
            meaning="how many seconds a write waits for the thread",
        )
        self.meter = meter
        self.embed_queue: Any = None  # a JobQueue: new turns stored unindexed, an embed job indexes them
        self._owned: list[Any] = []
        self._message_fields = message_fields(store)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        settings: Settings | None = None,
        summarizer: Summarizer | None = None,
        meter_embeddings: bool = False,
        embedder: Embeddings | str | None = None,
        api_key: str | None = None,
        pool_size: int | None = None,
    ) -> Memory:
        """Open the memory at ``url``: ``memory://``, ``sqlite:///PATH`` or ``postgresql://...``; or
        ``http(s)://HOST:PORT``, a ``remem serve`` (with its ``api_key``), through the same methods.

        The embedder, the chat model that writes summaries (none: extractive) and the token counter come
        from ``settings`` (default: :func:`remem.load_settings`). ``embedder`` overrides the setting's: a
        name (minilm, e5, fake) or any LangChain ``Embeddings`` (one that has ``dims``, or is probed once). Summariser calls are recorded in the usage
        ledger of the same database; ``meter_embeddings=True`` records the embedder's batches too (searches
        included, so a search then writes a row: off by default, as reads never write). ``pool_size``:
        on PostgreSQL, the store runs on a pool of up to that many connections, so that threads sharing
        this memory are served side by side (default: one connection, one call at a time).
        """
        from remem.memory._backends import open_embed_queue, open_store

        if isinstance(url, str) and url.startswith(("http://", "https://")):
            from remem.memory._remote import RemoteMemory

            if pool_size is not None:
                raise ConfigError(
                    "pool_size is for a database URL; a remem serve URL (http://...) takes none"
                )
            return RemoteMemory(url, api_key=api_key)
        if api_key is not None:
            raise ConfigError("api_key is for a remem serve URL (http://...); a database URL takes none")
        if settings is not None and not isinstance(settings, Settings):
            raise ArgumentTypeError(
                f"settings takes a remem.Settings (or None: load_settings()); got {settings!r}"
            )
        settings = settings or load_settings()
        meter = usage_meter(url, settings)
        if isinstance(embedder, str):
            settings, embedder = settings.replace(embedder=embedder), None
        store, owned = open_store(
            url, settings, meter=meter if meter_embeddings else None, embedder=embedder, pool_size=pool_size
        )
        owned.append(meter.ledger.close)
        if summarizer is None:
            from remem.models import chat_model_from_settings

            summarizer = summarizer_for(
                chat_model_from_settings(settings), settings.summary_max_tokens, settings.summary_prompt
            )
        memory = cls(
            store,
            summarizer=summarizer,
            token_counter=token_counter(settings.token_counter),
            thread_lease_timeout=settings.thread_lease_timeout,
            meter=meter,
        )
        memory.embed_queue = open_embed_queue(url, settings, owned)
        memory._owned = owned
        return memory

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Memory:
        """Open the memory at the configured ``database_url``."""
        settings = settings or load_settings()
        return cls.from_url(settings.database_url, settings=settings)

    def close(self) -> None:
        """Close the connections :meth:`from_url` opened (a store passed in is left open)."""
        while self._owned:
            closer = self._owned.pop()
            closer()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` sent as one message, by this memory's counter."""
        return self.token_counter([HumanMessage(content=check_text(text, "text"))])

    def _lease(self, thread_id: str) -> AbstractContextManager[ThreadLease]:
        return thread_lease(
            store_lease_target(self.store), thread_id, scope="memory", timeout=self.thread_lease_timeout
        )

    def _alease(self, thread_id: str) -> AbstractAsyncContextManager[ThreadLease]:
        return athread_lease(
            store_lease_target(self.store), thread_id, scope="memory", timeout=self.thread_lease_timeout
        )

    @property
    def _fold(self) -> FoldSpec | None:
        """The running summary appends extend (the extractive summariser's only; see FoldSpec)."""
        return fold_spec(self.summarizer)

    def _run(self, plan: Flow[Any]) -> Any:
        return run(plan, self.store, self.summarizer, self._lease, self.meter)

    async def _arun(self, plan: Flow[Any]) -> Any:
        return await arun(plan, self.store, self.summarizer, self._alease, self.meter)

    def _open_plan(
        self, thread_id: str, user_id: str | None, agent_id: str | None, frequency: int | None
    ) -> Flow[ThreadInfo]:
        check_label(thread_id, "thread_id")
        if user_id is not None:
            check_label(user_id, "user_id")
        return open_thread_plan(
            thread_id, user_id, agent_id, frequency, self.context_summary_update_frequency
        )

    def thread(
        self,
        thread_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        context_summary_update_frequency: int | None = None,
    ) -> Thread:
        """Create the thread or open it (a thread keeps the user it was created for)."""
        info: ThreadInfo = self._run(
            self._open_plan(thread_id, user_id, agent_id, context_summary_update_frequency)
        )
        return Thread(self, info)

    def _open_and_add(
        self,
        thread_id: str,
        messages: Sequence[Any],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[StoredMessage]:
        """``thread(thread_id, user_id=..., agent_id=...).add_messages(messages)`` under one lease, the
        thread's metadata read once (``remem serve``'s add, where each request opens its thread)."""
        check_label(thread_id, "thread_id")
        if user_id is not None:
            check_label(user_id, "user_id")
        plan = open_and_add_plan(
            thread_id,
            user_id,
            agent_id,
            messages,
            index_fields(self),
            self.context_summary_update_frequency,
            self._fold,
        )
        found: tuple[ThreadInfo, list[StoredMessage]] = self._run(plan)
        info, stored = found
        Thread(self, info)._queue_embedding(stored)
        return stored

    def _unread_thread(self, thread_id: str) -> Thread:
        """A :class:`Thread` on ``thread_id`` without reading it, for one call whose plan reads the
        thread's metadata itself and raises :class:`~remem.NotFoundError` as :meth:`get_thread` does (the
        context card: ``remem serve`` opens a thread per request, and a second read of it cost a
        transaction). Its ``user_id`` and ``agent_id`` are unknown (None): never add messages through it."""
        return Thread(self, ThreadInfo(check_label(thread_id, "thread_id"), None, None, ""))

    async def athread(
        self,
        thread_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        context_summary_update_frequency: int | None = None,
    ) -> Thread:
        """Async version of :meth:`thread`."""
        info: ThreadInfo = await self._arun(
            self._open_plan(thread_id, user_id, agent_id, context_summary_update_frequency)
        )
        return Thread(self, info)

    def get_thread(self, thread_id: str) -> Thread:
        """Open an existing thread; :class:`~remem.NotFoundError` when there is none."""
        info: ThreadInfo = self._run(thread_info_plan(check_label(thread_id, "thread_id")))
        return Thread(self, info)

    async def aget_thread(self, thread_id: str) -> Thread:
        """Async version of :meth:`get_thread`."""
        info: ThreadInfo = await self._arun(thread_info_plan(check_label(thread_id, "thread_id")))
        return Thread(self, info)

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
        types: Sequence[str] | None = None,
        k: int = 10,
    ) -> list[MemoryRecord]:
        """Records matching ``query``: messages of ``thread_id``, its latest summary (type ``"summary"``)
        and long-term memories of ``user_id`` (extracted or put by tools: ``user_id`` alone does not search
        the user's own turns; give their ``thread_id`` for that).

        A record matches when it holds a word of the query, or the hybrid ranking puts it above one that
        does (a near-paraphrase); a record that shares no word with the query is not listed, however
        similar the embedder finds it (context cards and recall still rank every candidate). ``score`` is
        the value the order follows (the fused hybrid score on remem's stores), never rising down the list.
        ``types`` keeps only those record types (``"message"`` for thread messages, ``"summary"``; memory
        types such as ``"fact"`` or ``"preference"``). Best first; ties broken by id, so the order is stable.
        """
        records: list[MemoryRecord] = self._run(
            search_plan(query, user_id=user_id, thread_id=thread_id, types=types, k=k, only_matches=True)
        )
        return records

    async def asearch(
        self,
        query: str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
        types: Sequence[str] | None = None,
        k: int = 10,
    ) -> list[MemoryRecord]:
        """Async version of :meth:`search`."""
        records: list[MemoryRecord] = await self._arun(
            search_plan(query, user_id=user_id, thread_id=thread_id, types=types, k=k, only_matches=True)
        )
        return records

    def search_threads(self, query: str, *, user_id: str | None = None, k: int = 10) -> list[MemoryRecord]:
        """The threads whose messages match ``query`` (as :meth:`search` matches), best first: one record
        per thread, its best matching message (``thread_id``, ``seq``, the keyword and vector ``signals``);
        at most ``k`` threads; ``user_id``: only that user's messages."""
        records: list[MemoryRecord] = self._run(thread_search_plan(query, user_id=user_id, k=k))
        return records

    async def asearch_threads(
        self, query: str, *, user_id: str | None = None, k: int = 10
    ) -> list[MemoryRecord]:
        """Async version of :meth:`search_threads`."""
        records: list[MemoryRecord] = await self._arun(thread_search_plan(query, user_id=user_id, k=k))
        return records

    def delete_memory(self, user_id: str, memory_id: str) -> None:
        """Delete the user's long-term memory ``memory_id``; :class:`~remem.NotFoundError` when there is none."""
        self._run(delete_memory_plan(user_id, memory_id))

    async def adelete_memory(self, user_id: str, memory_id: str) -> None:
        """Async version of :meth:`delete_memory`."""
        await self._arun(delete_memory_plan(user_id, memory_id))

    def edit_memory(self, user_id: str, memory_id: str, content: str) -> dict[str, Any]:
        """Replace the text of the user's long-term memory ``memory_id`` (re-indexed for search; its other
        fields kept) and return its new value; :class:`~remem.NotFoundError` when the user has none."""
        value: dict[str, Any] = self._run(edit_memory_plan(user_id, memory_id, content))
        return value

    async def aedit_memory(self, user_id: str, memory_id: str, content: str) -> dict[str, Any]:
        """Async version of :meth:`edit_memory`."""
        value: dict[str, Any] = await self._arun(edit_memory_plan(user_id, memory_id, content))
        return value
