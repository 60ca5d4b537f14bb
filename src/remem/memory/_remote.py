"""The memory client over HTTP: ``Memory.from_url("http://host:8420", api_key=...)``.

:class:`RemoteMemory` and :class:`RemoteThread` have the methods of :class:`~remem.memory.Memory` and
:class:`~remem.memory.Thread` that ``remem serve`` answers (thread, get_thread, search, forget, count_text;
info, add_messages, messages, get_summary, summaries, get_context_card, recall, and their async twins;
``thread_infos`` lists the tenant's threads), returning the
same dataclasses and raising the same errors: the server names remem's error class in its answer and it
is raised here again (a status without one maps to the nearest class). Every write is idempotent (messages
by id), so a retry after a dropped connection stores nothing twice; connection failures are retried twice.

Requests are built and answers read once (:class:`_Wire`); the sync client sends them with
``httpx.Client``, the async one with ``httpx.AsyncClient``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx
from langchain_core.messages import BaseMessage, ToolMessage, messages_from_dict

from remem import errors
from remem.memory._card import ContextCard, Recall
from remem.memory._records import MemoryRecord, StoredMessage, Summary, ThreadInfo
from remem.memory.client import DEFAULT_CARD_TOKEN_BUDGET, Memory, Thread
from remem.messages import is_derived
from remem.usage import Totals, UsageEvent

__all__ = ["RemoteMemory", "RemoteThread", "error_of"]

T = TypeVar("T")
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_BY_STATUS: dict[int, type[errors.RememError]] = {
    401: errors.ConfigError,
    403: errors.ConfigError,
    404: errors.NotFoundError,
    409: errors.ThreadBusyError,
    413: errors.RememUsageError,
    422: errors.RememUsageError,
    429: errors.RememRuntimeError,
    501: errors.MissingDependencyError,
}


def error_of(response: httpx.Response) -> errors.RememError:
    """The remem error an error answer stands for."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = str(body.get("detail") or response.reason_phrase or "the server refused the request")
    name = body.get("error")
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, errors.RememError) and cls is not errors.RememError:
        return cls(detail)
    if name == "RequestValidationError" and detail.startswith("messages"):
        return errors.InvalidMessagesError(detail)
    if response.status_code in (401, 403):
        detail = f"{detail} (check the api_key given to Memory.from_url)"
    if response.status_code == 429:
        detail = f"{detail}; retry after {response.headers.get('Retry-After', '1')} s"
    found = _BY_STATUS.get(response.status_code, errors.StorageError)
    return found(detail)


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}  # a class's fields, and whether each is a tuple


def _build(cls: type[T], data: Mapping[str, Any]) -> T:
    """A dataclass of the memory client from its JSON (lists back to tuples where the field is one)."""
    fields = _FIELDS.get(cls)
    if fields is None:  # found once per class: a card builds some thirty records and messages
        found = dataclasses.fields(cls)  # type: ignore[arg-type]
        fields = _FIELDS[cls] = tuple((f.name, str(f.type).startswith("tuple")) for f in found)
    values = {}
    for name, is_tuple in fields:
        if name in data:
            value = data[name]
            if is_tuple and isinstance(value, list):
                value = tuple(value)
            values[name] = value
    return cls(**values)


def _card(data: Mapping[str, Any]) -> ContextCard:
    card = _build(ContextCard, {k: v for k, v in data.items() if k not in ("records", "recent")})
    return dataclasses.replace(
        card,
        records=tuple(_build(MemoryRecord, r) for r in data.get("records", ())),
        recent=tuple(_build(StoredMessage, m) for m in data.get("recent", ())),
    )


def _recall(data: Mapping[str, Any]) -> Recall:
    records = tuple(_build(MemoryRecord, r) for r in data.get("records", ()))
    return Recall(str(data.get("content", "")), records, int(data.get("token_count", 0)))


def _message(item: Any) -> dict[str, Any]:
    if isinstance(item, BaseMessage):
        metadata: dict[str, Any] = {}
        if isinstance(item, ToolMessage):
            metadata["tool_call_id"] = item.tool_call_id
        found: dict[str, Any] = {
            "role": _ROLES.get(item.type, item.type),
            "content": item.text if isinstance(item.content, list) else str(item.content),
        }
        if item.id:
            found["id"] = str(item.id)
        if item.name:
            found["name"] = item.name
        if metadata:
            found["metadata"] = metadata
        return found
    if isinstance(item, Mapping):
        found = dict(item)
        if isinstance(found.get("timestamp"), dt.datetime):
            stamp = found["timestamp"].astimezone(dt.UTC)
            found["timestamp"] = stamp.isoformat(timespec="seconds").replace("+00:00", "Z")
        if isinstance(found.get("id"), int) and not isinstance(found["id"], bool):
            found["id"] = str(found["id"])
        return found
    raise errors.InvalidMessagesError(
        f"a message is a {type(item).__name__}; send a dict such as {{'role': 'user', 'content': 'text'}} "
        "or a LangChain message"
    )


def _given(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _path(*parts: str) -> str:
    return "/v1/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


@dataclasses.dataclass(frozen=True)
class _Call:
    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None


class _Wire:
    """What the sync and async clients share: the requests, and reading the answers."""

    @staticmethod
    def read(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise error_of(response)
        return None if response.status_code == 204 else response.json()

    @staticmethod
    def open_thread(
        thread_id: str, user_id: str | None, agent_id: str | None, frequency: int | None
    ) -> _Call:
        body = {"user_id": user_id, "agent_id": agent_id, "context_summary_update_frequency": frequency}
        return _Call("PUT", _path("threads", thread_id), {k: v for k, v in body.items() if v is not None})

    @staticmethod
    def get_thread(thread_id: str) -> _Call:
        return _Call("GET", _path("threads", thread_id))

    @staticmethod
    def search(
        query: str, user_id: str | None, thread_id: str | None, types: Sequence[str] | None, k: int
    ) -> _Call:
        body: dict[str, Any] = {"query": query, "k": k}
        for name, value in (("user_id", user_id), ("thread_id", thread_id)):
            if value is not None:
                body[name] = value
        if types is not None:
            body["types"] = list(types)
        return _Call("POST", "/v1/search", body)

    @staticmethod
    def forget(user_id: str | None, thread_id: str | None) -> _Call:
        body = {k: v for k, v in (("user_id", user_id), ("thread_id", thread_id)) if v is not None}
        return _Call("POST", "/v1/forget", body)

    @staticmethod
    def add(thread: RemoteThread, messages: Sequence[Any]) -> _Call:
        if isinstance(messages, str | Mapping) or not isinstance(messages, Sequence):
            raise errors.RememUsageError(
                "add_messages takes a list of messages; wrap a single message in a list"
            )
        body: dict[str, Any] = {"messages": [_message(m) for m in messages if not is_derived(m)]}
        if thread.user_id is not None:
            body["user_id"] = thread.user_id
        return _Call("POST", _path("threads", thread.thread_id, "messages"), body)

    @staticmethod
    def messages(thread_id: str, offset: int, limit: int = 1000) -> _Call:
        return _Call(
            "GET", _path("threads", thread_id, "messages"), params={"limit": limit, "offset": offset}
        )

    @staticmethod
    def summary(thread_id: str, except_last: int, token_budget: int) -> _Call:
        body = {"except_last": except_last, "token_budget": token_budget}
        return _Call("POST", _path("threads", thread_id, "summary"), body)

    @staticmethod
    def summaries(thread_id: str) -> _Call:
        return _Call("GET", _path("threads", thread_id, "summaries"))

    @staticmethod
    def recall(
        thread_id: str,
        query: str,
        k: int,
        exclude_ids: Sequence[str],
        types: Sequence[str] | None,
        budget: int,
    ) -> _Call:
        body = {"query": query, "k": k, "exclude_ids": list(exclude_ids), "token_budget": budget}
        if types is not None:
            body["types"] = list(types)
        return _Call("POST", _path("threads", thread_id, "recall"), body)

    @staticmethod
    def card(thread_id: str, arguments: Mapping[str, Any]) -> _Call:
        body = {k: (list(v) if isinstance(v, tuple) else v) for k, v in arguments.items()}
        return _Call("POST", _path("threads", thread_id, "card"), body)


def _reports(data: Mapping[str, Any]) -> list[Any]:
    from remem.erasure import ErasureReport, ForgetReport

    found = []
    for report in data.get("erasures", ()):
        store = _build(ForgetReport, report.get("store", {}))
        found.append(_build(ErasureReport, {**report, "store": store}))
    return found


def _page(data: Mapping[str, Any]) -> tuple[list[StoredMessage], int | None]:
    return [_build(StoredMessage, m) for m in data["messages"]], data.get("next_offset")


def _last(found: list[StoredMessage], last: int | None) -> list[StoredMessage]:
    if last is None:
        return found
    return found[len(found) - last :] if last > 0 else []


_CARD_ARGUMENTS = (
    "except_last_messages",
    "max_recent_messages",
    "max_relevant_results",
    "token_budget",
    "types",
    "metadata_filter",
    "query",
)


def _card_arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    found = {name: given[name] for name in _CARD_ARGUMENTS}
    if found["types"] is not None:
        found["types"] = list(found["types"])
    if found["metadata_filter"] is not None:
        found["metadata_filter"] = dict(found["metadata_filter"])
    return found


class RemoteMemory(Memory):
    """The memory ``remem serve`` at ``url`` holds, as the API key's tenant sees it (see the module)."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        # Not Memory.__init__: there is no store here; every call goes to the server.
        self.url = url.rstrip("/")
        self._headers = {"X-Api-Key": api_key} if api_key else {}
        self._timeout = timeout
        self._client = httpx.Client(
            base_url=self.url,
            headers=self._headers,
            timeout=timeout,
            transport=httpx.HTTPTransport(retries=2),
        )
        self._owned = [self._client.close]

    def __repr__(self) -> str:  # never the key
        return f"RemoteMemory({self.url!r})"

    def _send(self, call: _Call) -> Any:
        try:
            response = self._client.request(call.method, call.path, json=call.json, params=call.params)
        except httpx.HTTPError as exc:
            raise errors.StorageError(
                f"remem serve at {self.url} could not be reached ({type(exc).__name__}); check that it runs"
            ) from exc
        return _Wire.read(response)

    async def _asend(self, call: _Call) -> Any:
        try:
            async with httpx.AsyncClient(
                base_url=self.url,
                headers=self._headers,
                timeout=self._timeout,
                transport=httpx.AsyncHTTPTransport(retries=2),
            ) as client:
                response = await client.request(call.method, call.path, json=call.json, params=call.params)
        except httpx.HTTPError as exc:
            raise errors.StorageError(
                f"remem serve at {self.url} could not be reached ({type(exc).__name__}); check that it runs"
            ) from exc
        return _Wire.read(response)

    def thread_infos(self, *, page: int = 1000) -> list[ThreadInfo]:
        """Every thread of this key's tenant on the server (``GET /v1/threads``, page by page); what
        ``remem threads --db http://...`` lists. A server's own call, not one of :class:`Memory`'s."""
        found: list[ThreadInfo] = []
        while True:
            call = _Call("GET", "/v1/threads", params={"limit": page, "offset": len(found)})
            batch = [_build(ThreadInfo, t) for t in self._send(call)["threads"]]
            found.extend(batch)
            if len(batch) < page:
                return found

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` sent as one message, by the server's counter (``POST /v1/count``)."""
        return int(self._send(_Call("POST", "/v1/count", {"text": text}))["tokens"])

    # The server's own reads for the CLI's commands on it (``--db http://...``), each the tenant's part.

    def usage_events(
        self,
        *,
        thread_id: str | None = None,
        user_id: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[UsageEvent]:
        """The tenant's model calls in the server's usage ledger, oldest first (``Ledger.events``)."""
        params = _given(thread_id=thread_id, user_id=user_id, since=since, limit=limit)
        data = self._send(_Call("GET", "/v1/usage/events", params=params))
        return [_build(UsageEvent, e) for e in data["events"]]

    def usage_totals(
        self,
        *,
        by: str | None = None,
        thread_id: str | None = None,
        user_id: str | None = None,
        since: float | None = None,
    ) -> list[Totals]:
        """The tenant's model calls summed, grouped ``by`` (``Ledger.totals``)."""
        params = _given(by=by, thread_id=thread_id, user_id=user_id, since=since)
        found = []
        for t in self._send(_Call("GET", "/v1/usage/totals", params=params))["totals"]:
            key = tuple(t["key"]) if by == "turn" else t.get("key")
            found.append(_build(Totals, {**t, "key": key}))
        return found

    def checkpoint_state(self, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
        """The thread's latest checkpointed state (or at ``checkpoint_id``): ``messages`` (LangChain
        messages), ``summary``, ``next``, ``usage``, ``turn``, ``checkpoint_id``, ``created_at``."""
        params = _given(checkpoint_id=checkpoint_id)
        data = dict(self._send(_Call("GET", _path("threads", thread_id, "checkpoint"), params=params)))
        data["messages"] = messages_from_dict(data["messages"])
        return data

    def checkpoint_history(self, thread_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The thread's checkpoints, newest first (``remem.inspection.HistoryRow``'s fields)."""
        call = _Call("GET", _path("threads", thread_id, "checkpoints"), params={"limit": limit})
        return list(self._send(call)["checkpoints"])

    def checkpoint_stats(self) -> dict[str, Any]:
        """The tenant's checkpointed threads, newest first, and their bytes."""
        return dict(self._send(_Call("GET", "/v1/checkpoints")))

    def prune_checkpoints(
        self,
        thread_ids: Sequence[str] = (),
        *,
        strategy: str = "keep_latest",
        older_than: float | None = None,
    ) -> dict[str, Any]:
        """Prune the tenant's threads named (all of them when none is): ``deleted`` and ``threads``."""
        body: dict[str, Any] = {"strategy": strategy, "older_than_seconds": older_than}
        body.update({"thread_ids": list(thread_ids)} if thread_ids else {"all": True})
        return dict(self._send(_Call("POST", "/v1/checkpoints/prune", body)))

    def thread(
        self,
        thread_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        context_summary_update_frequency: int | None = None,
    ) -> Thread:
        call = _Wire.open_thread(thread_id, user_id, agent_id, context_summary_update_frequency)
        return RemoteThread(self, _build(ThreadInfo, self._send(call)))

    async def athread(
        self,
        thread_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        context_summary_update_frequency: int | None = None,
    ) -> Thread:
        call = _Wire.open_thread(thread_id, user_id, agent_id, context_summary_update_frequency)
        return RemoteThread(self, _build(ThreadInfo, await self._asend(call)))

    def get_thread(self, thread_id: str) -> Thread:
        return RemoteThread(self, _build(ThreadInfo, self._send(_Wire.get_thread(thread_id))))

    async def aget_thread(self, thread_id: str) -> Thread:
        return RemoteThread(self, _build(ThreadInfo, await self._asend(_Wire.get_thread(thread_id))))

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
        types: Sequence[str] | None = None,
        k: int = 10,
    ) -> list[MemoryRecord]:
        data = self._send(_Wire.search(query, user_id, thread_id, types, k))
        return [_build(MemoryRecord, r) for r in data["results"]]

    async def asearch(
        self,
        query: str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
        types: Sequence[str] | None = None,
        k: int = 10,
    ) -> list[MemoryRecord]:
        data = await self._asend(_Wire.search(query, user_id, thread_id, types, k))
        return [_build(MemoryRecord, r) for r in data["results"]]

    def forget(self, *, user_id: str | None = None, thread_id: str | None = None) -> list[Any]:
        """Erase a user's or a thread's data on the server (``remem.erasure.erase`` there); the reports."""
        return _reports(self._send(_Wire.forget(user_id, thread_id)))

    async def aforget(self, *, user_id: str | None = None, thread_id: str | None = None) -> list[Any]:
        """Async version of :meth:`forget`."""
        return _reports(await self._asend(_Wire.forget(user_id, thread_id)))


class RemoteThread(Thread):
    """A thread of :class:`RemoteMemory`: every call goes to the server."""

    memory: RemoteMemory

    def info(self) -> ThreadInfo:
        return _build(ThreadInfo, self.memory._send(_Wire.get_thread(self.thread_id)))

    async def ainfo(self) -> ThreadInfo:
        return _build(ThreadInfo, await self.memory._asend(_Wire.get_thread(self.thread_id)))

    def add_messages(self, messages: Sequence[Any]) -> list[StoredMessage]:
        data = self.memory._send(_Wire.add(self, messages))
        return [_build(StoredMessage, m) for m in data["messages"]]

    async def aadd_messages(self, messages: Sequence[Any]) -> list[StoredMessage]:
        data = await self.memory._asend(_Wire.add(self, messages))
        return [_build(StoredMessage, m) for m in data["messages"]]

    def messages(self, last: int | None = None) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        offset: int | None = 0
        while offset is not None:
            page, offset = _page(self.memory._send(_Wire.messages(self.thread_id, offset)))
            found.extend(page)
        return _last(found, last)

    async def amessages(self, last: int | None = None) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        offset: int | None = 0
        while offset is not None:
            page, offset = _page(await self.memory._asend(_Wire.messages(self.thread_id, offset)))
            found.extend(page)
        return _last(found, last)

    def message_page(self, offset: int = 0, limit: int = 100) -> tuple[list[StoredMessage], int]:
        data = self.memory._send(_Wire.messages(self.thread_id, offset, limit))
        return _page(data)[0], int(data["total"])

    async def amessage_page(self, offset: int = 0, limit: int = 100) -> tuple[list[StoredMessage], int]:
        data = await self.memory._asend(_Wire.messages(self.thread_id, offset, limit))
        return _page(data)[0], int(data["total"])

    def get_summary(self, except_last: int = 0, token_budget: int = 1000) -> Summary:
        return _build(Summary, self.memory._send(_Wire.summary(self.thread_id, except_last, token_budget)))

    async def aget_summary(self, except_last: int = 0, token_budget: int = 1000) -> Summary:
        data = await self.memory._asend(_Wire.summary(self.thread_id, except_last, token_budget))
        return _build(Summary, data)

    def summaries(self) -> list[Summary]:
        data = self.memory._send(_Wire.summaries(self.thread_id))
        return [_build(Summary, s) for s in data["summaries"]]

    async def asummaries(self) -> list[Summary]:
        data = await self.memory._asend(_Wire.summaries(self.thread_id))
        return [_build(Summary, s) for s in data["summaries"]]

    def recall(
        self,
        query: str,
        k: int = 3,
        *,
        exclude_ids: Sequence[str] = (),
        types: Sequence[str] | None = None,
        token_budget: int = 400,
    ) -> Recall:
        call = _Wire.recall(self.thread_id, query, k, exclude_ids, types, token_budget)
        return _recall(self.memory._send(call))

    async def arecall(
        self,
        query: str,
        k: int = 3,
        *,
        exclude_ids: Sequence[str] = (),
        types: Sequence[str] | None = None,
        token_budget: int = 400,
    ) -> Recall:
        call = _Wire.recall(self.thread_id, query, k, exclude_ids, types, token_budget)
        return _recall(await self.memory._asend(call))

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
        arguments = _card_arguments(locals())
        return _card(self.memory._send(_Wire.card(self.thread_id, arguments)))

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
        arguments = _card_arguments(locals())
        return _card(await self.memory._asend(_Wire.card(self.thread_id, arguments)))
