"""What the memory client stores and returns, and how it is laid out in a LangGraph ``BaseStore``.

Pure: namespaces, keys, and the encoding of values. No I/O.

Every item is a plain JSON value in the store, under the namespaces and keys that ``remem.layout``
names (metadata, order chunks, messages, summary revisions; long-term memories under the user).

A message's key is the caller's message id, so a record found by search names the message it came from.
The order chunks make "the last N messages" two reads at any thread length.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from remem._clock import now_iso
from remem.errors import InvalidMessagesError

# The memory client's short names for the layout's namespaces and keys (imported, never redefined).
from remem.layout import THREAD_META_KEY as META_KEY
from remem.layout import check_label, chunk_key
from remem.layout import thread_listing as listing_ns
from remem.layout import thread_messages as messages_ns
from remem.layout import thread_meta as meta_ns
from remem.layout import thread_order as order_ns
from remem.layout import thread_summaries as summaries_ns
from remem.layout import user_memories as memories_ns

__all__ = [
    "CONTEXT_FIELD",
    "META_KEY",
    "MONTHS",
    "ORDER_CHUNK",
    "ROLES",
    "MemoryRecord",
    "StoredMessage",
    "Summary",
    "ThreadInfo",
    "check_label",
    "chunk_key",
    "index_context",
    "listing_ns",
    "memories_ns",
    "messages_ns",
    "meta_ns",
    "now_iso",
    "order_ns",
    "parse_timestamp",
    "readable_date",
    "record_from_memory",
    "record_from_message",
    "speaker_of",
    "stored_message_from_input",
    "summaries_ns",
]

ORDER_CHUNK = 512
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
CONTEXT_FIELD = "context"
"""The field of a stored message that the search index holds besides its ``content``: who said it and
when (:func:`index_context`). It is never shown as the message's text."""
ROLES = ("user", "assistant", "system", "tool")
_ROLE_ALIASES = {"human": "user", "ai": "assistant", "user": "user", "assistant": "assistant"}
_ROLE_ALIASES |= {"system": "system", "tool": "tool", "developer": "system"}


@dataclass(frozen=True)
class ThreadInfo:
    """A thread's metadata as stored."""

    thread_id: str
    user_id: str | None
    agent_id: str | None
    created_at: str
    message_count: int = 0
    last_user_seq: int = -1
    summary_revision: int = 0
    context_summary_update_frequency: int = 4
    last_activity: str = ""
    """When the thread's latest message was said ("" before its first, and in metadata written before
    remem kept it)."""

    def to_value(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "created_at": self.created_at,
            "message_count": self.message_count,
            "last_user_seq": self.last_user_seq,
            "summary_revision": self.summary_revision,
            "context_summary_update_frequency": self.context_summary_update_frequency,
            "last_activity": self.last_activity,
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> ThreadInfo:
        return cls(
            thread_id=str(value["thread_id"]),
            user_id=value.get("user_id"),
            agent_id=value.get("agent_id"),
            created_at=str(value.get("created_at", "")),
            message_count=int(value.get("message_count", 0)),
            last_user_seq=int(value.get("last_user_seq", -1)),
            summary_revision=int(value.get("summary_revision", 0)),
            context_summary_update_frequency=int(value.get("context_summary_update_frequency", 4)),
            last_activity=str(value.get("last_activity") or ""),
        )


def parse_timestamp(timestamp: str) -> dt.datetime | None:
    """A stored timestamp (``2026-11-29T12:00:00Z`` or any ISO 8601 form) as an aware UTC datetime, or
    None when it is not one."""
    if not timestamp:
        return None
    try:
        when = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def readable_date(timestamp: str) -> str:
    """``8 May 2023`` for a stored timestamp (English month names, whatever the locale); "" if unreadable."""
    when = parse_timestamp(timestamp)
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}" if when else ""


def speaker_of(metadata: Mapping[str, Any]) -> str:
    """The speaker's name a message carries (its ``speaker`` metadata, else a LangChain ``name``), or ""."""
    for key in ("speaker", "name"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return ""


def index_context(message: StoredMessage) -> str:
    """What the index holds about a message besides its text: ``Caroline, 8 May 2023`` (the speaker's
    name when the message has one, then the date), so that a question naming the speaker or the date
    finds it. The role is left out on purpose: words such as "user" in every turn made every turn a
    keyword match for any question about "the user": measured with MiniLM on the generated dev set
    (``bench/data/retrieval_dev.json``), hybrid recall@5 fell from 0.94 to 0.56 with "speaker: user, date:
    ..." and stayed at 0.93 with the date alone. Labels ("speaker:", "date:") would do the same to
    "what date ..." questions."""
    return ", ".join(p for p in (speaker_of(message.metadata), readable_date(message.timestamp)) if p)


@dataclass(frozen=True)
class StoredMessage:
    """One message of a thread, as stored: the caller's id, its role and text, when, and its metadata."""

    id: str
    role: str
    content: str
    timestamp: str
    seq: int = -1
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_value(self, thread_id: str, user_id: str | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "content": self.content,
            "timestamp": self.timestamp,
            "seq": self.seq,
            "metadata": dict(self.metadata),
            "thread_id": thread_id,
            "user_id": user_id,
            CONTEXT_FIELD: index_context(self),
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> StoredMessage:
        return cls(
            id=str(value["id"]),
            role=str(value.get("role", "user")),
            content=str(value.get("content", "")),
            timestamp=str(value.get("timestamp", "")),
            seq=int(value.get("seq", -1)),
            metadata=dict(value.get("metadata") or {}),
        )

    def to_langchain(self) -> BaseMessage:
        """The message as a LangChain message with the same id."""
        if self.role == "assistant":
            return AIMessage(content=self.content, id=self.id)
        if self.role == "system":
            return SystemMessage(content=self.content, id=self.id)
        if self.role == "tool":
            return ToolMessage(
                content=self.content, id=self.id, tool_call_id=self.metadata.get("tool_call_id", "")
            )
        return HumanMessage(content=self.content, id=self.id)


def _role_of(message: BaseMessage) -> str:
    return _ROLE_ALIASES.get(message.type, message.type)


def stored_message_from_input(item: Any, position: int) -> StoredMessage:
    """Read one input of ``add_messages``: a dict (role, content, optional id, timestamp, metadata)
    or a LangChain message. Ids are kept; a missing id gets a new UUID."""
    if isinstance(item, BaseMessage):
        metadata: dict[str, Any] = {}
        if isinstance(item, ToolMessage):
            metadata["tool_call_id"] = item.tool_call_id
        if item.name:
            metadata["name"] = item.name
        kind = _role_of(item)
        text = item.text if isinstance(item.content, list) else str(item.content)
        # a reply may be only tool calls, and a tool may return nothing; a user or system turn says something
        _check_content(text, position, empty_ok=kind in ("assistant", "tool"))
        return StoredMessage(
            id=str(item.id or uuid.uuid4()),
            role=kind,
            content=text,
            timestamp=now_iso(),
            metadata=metadata,
        )
    if not isinstance(item, Mapping):
        raise InvalidMessagesError(
            f"message {position} is a {type(item).__name__}; send a dict such as "
            "{'role': 'user', 'content': 'text'} or a LangChain message"
        )
    role = _ROLE_ALIASES.get(str(item.get("role", "")).lower())
    if role is None:
        raise InvalidMessagesError(
            f"message {position} has role {item.get('role')!r}; use one of {', '.join(ROLES)}"
        )
    content = item.get("content")
    if not isinstance(content, str):
        raise InvalidMessagesError(f"message {position} has no text 'content'; give it a string")
    _check_content(content, position, empty_ok=role == "tool")  # a tool may return nothing
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidMessagesError(f"message {position}: 'metadata' must be a dict")
    metadata = dict(metadata)
    call_id = item.get("tool_call_id", metadata.get("tool_call_id"))
    if role == "tool":
        if not isinstance(call_id, str) or not call_id.strip():
            raise InvalidMessagesError(
                f"message {position} is a tool result without a 'tool_call_id'; give the id of the "
                "assistant's tool call it answers, e.g. {'role': 'tool', 'content': '...', "
                "'tool_call_id': 'call_1'}"
            )
        metadata["tool_call_id"] = call_id
    for key in ("speaker", "name"):  # who said it (a chat's participant), kept with the message
        if isinstance(item.get(key), str) and item[key].strip() and key not in metadata:
            metadata[key] = item[key]
    timestamp = item.get("timestamp")
    if timestamp is not None and not isinstance(timestamp, str | dt.datetime):
        raise InvalidMessagesError(
            f"message {position} has timestamp {timestamp!r}; give an ISO 8601 text "
            "('2026-11-29T12:00:00Z') or a datetime"
        )
    if isinstance(timestamp, str) and parse_timestamp(timestamp) is None:
        raise InvalidMessagesError(
            f"message {position} has timestamp {timestamp!r:.60}, which is not a date; give an ISO 8601 "
            "text ('2026-11-29T12:00:00Z') or a datetime"
        )
    if isinstance(timestamp, dt.datetime):
        timestamp = (
            timestamp.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        )  # as now_iso
    message_id = item.get("id")
    if message_id is not None and (isinstance(message_id, bool) or not isinstance(message_id, str | int)):
        raise InvalidMessagesError(f"message {position} has id {message_id!r}; give a text such as 'm1'")
    return StoredMessage(
        id=str(message_id) if message_id else str(uuid.uuid4()),
        role=role,
        content=content,
        timestamp=str(timestamp) if timestamp else now_iso(),
        metadata=dict(metadata),
    )


def _check_content(text: str, position: int, *, empty_ok: bool) -> None:
    if not empty_ok and not text.strip():
        raise InvalidMessagesError(
            f"message {position} has empty content; send the text it says (or leave the message out)"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessagesError(
            f"message {position}'s content holds a lone surrogate, which is not Unicode text; decode "
            "the text from its bytes with errors='strict' (or 'replace') before sending it"
        ) from None


@dataclass(frozen=True)
class Summary:
    """A thread's summary: its text, the messages it covers, and its revision.

    ``covered_count`` is the watermark: the summary covers the thread's first ``covered_count``
    messages (ids ``first_message_id`` .. ``last_message_id``). Revision 0 is the empty summary.
    """

    text: str
    revision: int
    covered_count: int
    first_message_id: str | None = None
    last_message_id: str | None = None
    topics: tuple[str, ...] = ()
    based_on: int = 0
    created_at: str = ""
    model: str = ""
    truncated: bool = False

    def to_value(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "revision": self.revision,
            "covered_count": self.covered_count,
            "first_message_id": self.first_message_id,
            "last_message_id": self.last_message_id,
            "topics": list(self.topics),
            "based_on": self.based_on,
            "created_at": self.created_at,
            "model": self.model,
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> Summary:
        return cls(
            text=str(value.get("text", "")),
            revision=int(value["revision"]),
            covered_count=int(value.get("covered_count", 0)),
            first_message_id=value.get("first_message_id"),
            last_message_id=value.get("last_message_id"),
            topics=tuple(value.get("topics") or ()),
            based_on=int(value.get("based_on", 0)),
            created_at=str(value.get("created_at", "")),
            model=str(value.get("model", "")),
        )


EMPTY_SUMMARY = Summary(text="", revision=0, covered_count=0)


@dataclass(frozen=True)
class MemoryRecord:
    """A record found by search: a thread message or a long-term memory.

    A message record's ``id`` is the caller's message id and its ``source_message_ids`` is ``(id,)``.
    """

    id: str
    type: str
    content: str
    score: float
    status: str = "active"
    source_message_ids: tuple[str, ...] = ()
    thread_id: str | None = None
    user_id: str | None = None
    timestamp: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    speaker: str = ""
    """Who said it: a message's speaker name, else its role ("" for a long-term memory)."""
    seq: int = -1
    """A message record's place in its thread (-1 for a long-term memory)."""
    role: str = ""
    """A message record's role ("" for a long-term memory)."""
    signals: dict[str, float] = field(default_factory=dict, compare=False)
    """Why search found it: the store's per-signal scores (``keyword``, ``keyword_rank``, ``vector``,
    ``vector_rank``, ``fused``, where that signal found it; empty on a stock store). Not compared."""


def record_from_message(
    value: Mapping[str, Any], score: float | None, signals: Mapping[str, float] | None = None
) -> MemoryRecord:
    message = StoredMessage.from_value(value)
    return MemoryRecord(
        id=message.id,
        type="message",
        content=f"{message.role}: {message.content}",
        score=float(score or 0.0),
        status="active",
        source_message_ids=(message.id,),
        thread_id=value.get("thread_id"),
        user_id=value.get("user_id"),
        timestamp=message.timestamp,
        metadata=message.metadata,
        speaker=speaker_of(message.metadata) or message.role,
        seq=message.seq,
        role=message.role,
        signals=dict(signals or {}),
    )


def _texts(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(str(v) for v in value)
    return ()


def record_from_memory(
    key: str, value: Mapping[str, Any], score: float | None, signals: Mapping[str, float] | None = None
) -> MemoryRecord:
    """Read a long-term memory item, tolerating the shapes extraction and hand-written puts use."""
    content = value.get("content", value.get("text", value.get("memory")))
    if not isinstance(content, str):
        content = ", ".join(f"{k}={v}" for k, v in sorted(value.items()) if isinstance(v, str | int | float))
    sources = value.get("source_message_ids", value.get("sources", ()))
    metadata = value.get("metadata")
    return MemoryRecord(
        id=str(value.get("id", key)),
        type=str(value.get("type", value.get("kind", "memory"))),
        content=content,
        score=float(score or 0.0),
        status="invalid" if value.get("valid") is False else str(value.get("status", "active")),
        source_message_ids=_texts(sources),
        thread_id=value.get("thread_id") if isinstance(value.get("thread_id"), str) else None,
        user_id=value.get("user_id") if isinstance(value.get("user_id"), str) else None,
        timestamp=str(value.get("updated_at", value.get("created_at", ""))),
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        signals=dict(signals or {}),
    )
