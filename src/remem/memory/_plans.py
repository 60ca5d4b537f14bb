"""The memory client's thread operations as flows (see ``_effects``): open, append, list, summarise; all
logic, no I/O (search, recall and the context card are in ``_search``).

Each public plan reads the thread's metadata first, so that several processes sharing one store see
each other's writes. Writes of one operation go to the store in one batch (one transaction in remem's
stores). Every read-modify-write of a thread (its metadata, the numbering of appended messages) runs as a
:class:`Leased` sub-plan, under the thread's lease, so concurrent writers take turns instead of
overwriting each other's counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.store.base import GetOp, PutOp

from remem.errors import NotFoundError, RememUsageError
from remem.memory._args import check_text, check_whole
from remem.memory._card import truncate_to_budget as _truncate
from remem.memory._effects import Flow, Leased, StoreCall, SummarizeCall
from remem.memory._records import (
    CONTEXT_FIELD,
    EMPTY_SUMMARY,
    META_KEY,
    ORDER_CHUNK,
    StoredMessage,
    Summary,
    ThreadInfo,
    check_label,
    chunk_key,
    listing_ns,
    memories_ns,
    messages_ns,
    meta_ns,
    now_iso,
    order_ns,
    stored_message_from_input,
    summaries_ns,
)
from remem.memory._topics import extract_topics
from remem.messages import is_derived
from remem.store import keyword_only
from remem.summarize import ExtractiveSummarizer, Summarizer, SummaryResult

__all__ = [
    "FOLD_KEY",
    "FREQUENCY_MEANING",
    "MESSAGE_FIELDS",
    "FoldSpec",
    "TextCounter",
    "add_messages_plan",
    "delete_memory_plan",
    "drop_info",
    "edit_memory_plan",
    "fold_spec",
    "ids_between",
    "list_messages_plan",
    "message_page_plan",
    "messages_by_id",
    "open_and_add_plan",
    "open_thread_plan",
    "revision_within",
    "save_info",
    "summaries_plan",
    "summary_at",
    "summary_plan",
    "thread_info_plan",
]

TextCounter = Callable[[str], int]
SUMMARY_PAGE = 512
"""Messages read and summarised at a time when a summary catches up (a multiple of the extractive
summariser's step, so paging does not change its result)."""
MESSAGE_FIELDS = ("content", keyword_only(CONTEXT_FIELD))
"""What the index holds of a message: its text, embedded and in the keyword document, and who said it
when (``_records.index_context``), in the keyword document only: a name or a date embedded as a vector of
its own outranks every real answer for a question naming it (``remem.store.KEYWORD_ONLY``)."""
FREQUENCY_MEANING = "new messages a thread gathers before its card's summary is extended; 1: at every card"
FOLD_KEY = "fold"
"""The key, among a thread's summary revisions (``chunk_key`` numbers), of its running fold."""
FOLD_LAG = 64
"""Messages the fold stays behind the thread's end, so that a card leaving out its last few messages
(``except_last_messages``) can still start from it."""


@dataclasses.dataclass(frozen=True)
class FoldSpec:
    """The extractive summariser a thread's running fold is made with (``signature``) and its step.

    With the extractive summariser (cheap and deterministic), each append folds the thread's complete
    steps of ``step`` messages into a running summary (the fold, stored beside the revisions), up to
    :data:`FOLD_LAG` messages before the end. A summary or a card then starts from the fold and reads only
    what came after it: bounded work however long the thread, where extending the last revision reads
    every message since it. Summarising the fold's messages in steps from the first is what one call
    over them does (a rendered step reads back as the same points), so the fold's summary is the one a
    single call would write. Folding is bounded per append (its new messages and two steps more), so a
    thread written before the fold existed catches up over its next appends."""

    signature: str
    step: int


def fold_spec(summarizer: Summarizer) -> FoldSpec | None:
    """The fold ``summarizer`` keeps, if any: only the extractive one (a model call per append, no)."""
    if type(summarizer) is not ExtractiveSummarizer:
        return None
    s = summarizer
    return FoldSpec(
        f"extractive/{s.max_tokens}/{s.max_points_per_message}/{s.chunk_messages}", s.chunk_messages
    )


@dataclasses.dataclass(frozen=True)
class _Fold:
    text: str
    covered: int
    first_id: str | None
    last_id: str | None

    def to_value(self, spec: FoldSpec) -> dict[str, Any]:
        return {
            "signature": spec.signature,
            "covered": self.covered,
            "text": self.text,
            "first_id": self.first_id,
            "last_id": self.last_id,
        }


def _read_fold(thread_id: str, spec: FoldSpec) -> Flow[_Fold | None]:
    """The thread's fold, if it was made by ``spec``'s summariser."""
    (item,) = yield StoreCall([GetOp(summaries_ns(thread_id), FOLD_KEY)])
    if item is None or item.value.get("signature") != spec.signature:
        return None
    v = item.value
    return _Fold(str(v.get("text", "")), int(v.get("covered", 0)), v.get("first_id"), v.get("last_id"))


def _fold_puts(
    thread_id: str, info: ThreadInfo, added: Sequence[StoredMessage], spec: FoldSpec
) -> Flow[list[PutOp]]:
    """The writes that fold the complete steps an append of ``added`` (after ``info.message_count``
    messages) makes available; none when no step is complete."""
    old, step = info.message_count, spec.step
    target = (old + len(added) - FOLD_LAG) // step * step
    if target <= 0:
        return []
    fold = yield from _read_fold(thread_id, spec)
    if fold is None:
        fold = _Fold("", 0, None, None)
    target = min(target, fold.covered + (len(added) // step + 2) * step)
    if target <= fold.covered:
        return []
    messages: list[StoredMessage] = []
    if fold.covered < old:
        ids = yield from ids_between(thread_id, fold.covered, min(target, old))
        messages = yield from messages_by_id(thread_id, ids)
    if target > old:
        messages += added[max(fold.covered - old, 0) : target - old]
    result: SummaryResult = yield SummarizeCall(
        fold.text, [m.to_langchain() for m in messages], thread_id, info.user_id
    )
    first_id = fold.first_id or (messages[0].id if messages else None)
    last_id = messages[-1].id if messages else fold.last_id
    new = _Fold(result.text, target, first_id, last_id)
    return [PutOp(summaries_ns(thread_id), FOLD_KEY, new.to_value(spec), index=False)]


def _not_found(thread_id: str) -> NotFoundError:
    return NotFoundError(
        f"thread {thread_id!r} does not exist; open it first with memory.thread({thread_id!r}, user_id=...)"
    )


def save_info(thread_id: str, info: ThreadInfo) -> list[PutOp]:
    """The writes of a thread's metadata: the item and its copy in the list of threads
    (:func:`remem.layout.thread_listing`). Every write of a thread's metadata goes through here."""
    value = info.to_value()
    return [
        PutOp(meta_ns(thread_id), META_KEY, value, index=False),
        PutOp(listing_ns(thread_id), META_KEY, value, index=False),
    ]


def drop_info(thread_id: str) -> list[PutOp]:
    """The deletes of a thread's metadata and its copy in the list of threads."""
    return [PutOp(meta_ns(thread_id), META_KEY, None), PutOp(listing_ns(thread_id), META_KEY, None)]


def thread_info_plan(thread_id: str) -> Flow[ThreadInfo]:
    (item,) = yield StoreCall([GetOp(meta_ns(thread_id), META_KEY)])
    if item is None:
        raise _not_found(thread_id)
    return ThreadInfo.from_value(item.value)


def open_thread_plan(
    thread_id: str, user_id: str | None, agent_id: str | None, frequency: int | None, default_frequency: int
) -> Flow[ThreadInfo]:
    """Create the thread, or open it and check that it belongs to ``user_id``."""
    if agent_id is not None:
        check_text(agent_id, "agent_id")
    if frequency is not None:
        check_whole(
            frequency, "context_summary_update_frequency", least=1, meaning=FREQUENCY_MEANING, example=4
        )
    info: ThreadInfo = yield Leased(
        thread_id, _open_thread(thread_id, user_id, agent_id, frequency, default_frequency)
    )
    return info


def _open_thread(
    thread_id: str, user_id: str | None, agent_id: str | None, frequency: int | None, default_frequency: int
) -> Flow[ThreadInfo]:
    (item,) = yield StoreCall([GetOp(meta_ns(thread_id), META_KEY)])
    if item is None:
        info = ThreadInfo(
            thread_id=thread_id,
            user_id=user_id,
            agent_id=agent_id,
            created_at=now_iso(),
            context_summary_update_frequency=frequency or default_frequency,
        )
    else:
        info = ThreadInfo.from_value(item.value)
        if user_id is not None and info.user_id is not None and info.user_id != user_id:
            raise RememUsageError(
                f"thread {thread_id!r} belongs to user {info.user_id!r}, not {user_id!r}; "
                "use another thread id for this user"
            )
        changed = dataclasses.replace(
            info,
            user_id=info.user_id or user_id,
            agent_id=info.agent_id or agent_id,
            context_summary_update_frequency=frequency or info.context_summary_update_frequency,
        )
        if changed == info:
            return info
        info = changed
    yield StoreCall(save_info(thread_id, info))
    return info


def ids_between(thread_id: str, start: int, end: int) -> Flow[list[str]]:
    """Ids of the messages with ``start <= seq < end``."""
    start = max(start, 0)
    if end <= start:
        return []
    first, last = start // ORDER_CHUNK, (end - 1) // ORDER_CHUNK
    items = yield StoreCall([GetOp(order_ns(thread_id), chunk_key(n)) for n in range(first, last + 1)])
    ids: list[str] = []
    for item in items:
        ids.extend(item.value["ids"] if item is not None else ())
    offset = first * ORDER_CHUNK
    return ids[start - offset : end - offset]


def messages_by_id(thread_id: str, ids: Sequence[str]) -> Flow[list[StoredMessage]]:
    if not ids:
        return []
    items = yield StoreCall([GetOp(messages_ns(thread_id), i) for i in ids])
    return [StoredMessage.from_value(item.value) for item in items if item is not None]


def add_messages_plan(
    thread_id: str,
    inputs: Sequence[Any],
    fields: Sequence[str] = MESSAGE_FIELDS,
    fold: FoldSpec | None = None,
) -> Flow[list[StoredMessage]]:
    """Append messages, keeping the caller's ids, and return each as stored, in the order given.

    A message whose id the thread already holds is not added again: it is returned as it was stored.
    One that was stored but never made it into the thread's order (a write of an older version that
    lost a race) is appended now, so that a retry makes it visible. A message remem derived from memory
    is not a turn and is skipped. ``fields``: what the search index holds of each message; ``fold``: the
    running summary the append extends (:class:`FoldSpec`), if any."""
    stored: list[StoredMessage] = yield Leased(
        thread_id, _append(thread_id, _parsed(inputs), fields, None, fold)
    )
    return stored


def _parsed(inputs: Sequence[Any]) -> list[StoredMessage]:
    if isinstance(inputs, str | Mapping) or not isinstance(inputs, Sequence):
        raise RememUsageError("add_messages takes a list of messages; wrap a single message in a list")
    return [stored_message_from_input(item, n) for n, item in enumerate(inputs) if not is_derived(item)]


def open_and_add_plan(
    thread_id: str,
    user_id: str | None,
    agent_id: str | None,
    inputs: Sequence[Any],
    fields: Sequence[str],
    default_frequency: int,
    fold: FoldSpec | None = None,
) -> Flow[tuple[ThreadInfo, list[StoredMessage]]]:
    """:func:`open_thread_plan` then :func:`add_messages_plan` under one lease, the metadata read once
    (``remem serve``'s add, which creates the thread when new: one lease and one transaction fewer than
    the two plans). The messages are checked before the lease, so a refused one creates no thread."""
    if agent_id is not None:
        check_text(agent_id, "agent_id")
    parsed = _parsed(inputs)

    def both() -> Flow[tuple[ThreadInfo, list[StoredMessage]]]:
        info = yield from _open_thread(thread_id, user_id, agent_id, None, default_frequency)
        stored = yield from _append(thread_id, parsed, fields, info, fold)
        return info, stored

    found: tuple[ThreadInfo, list[StoredMessage]] = yield Leased(thread_id, both())
    return found


def _in_order(thread_id: str, info: ThreadInfo, seqs: Mapping[str, int]) -> Flow[set[str]]:
    """The ids among ``seqs`` (id -> stored seq) that the thread's order holds at that seq."""
    wanted = {seq // ORDER_CHUNK for seq in seqs.values() if 0 <= seq < info.message_count}
    numbers = sorted(wanted)
    if not numbers:
        return set()
    items = yield StoreCall([GetOp(order_ns(thread_id), chunk_key(n)) for n in numbers])
    chunks = {
        n: item.value["ids"] if item is not None else [] for n, item in zip(numbers, items, strict=True)
    }
    placed: set[str] = set()
    for message_id, seq in seqs.items():
        ids = chunks.get(seq // ORDER_CHUNK, [])
        if seq % ORDER_CHUNK < len(ids) and ids[seq % ORDER_CHUNK] == message_id:
            placed.add(message_id)
    return placed


def _append(
    thread_id: str,
    parsed: Sequence[StoredMessage],
    fields: Sequence[str],
    info: ThreadInfo | None = None,
    fold: FoldSpec | None = None,
) -> Flow[list[StoredMessage]]:
    """``info``: the thread's metadata as read under the same lease (read here when None)."""
    if info is None:
        info = yield from thread_info_plan(thread_id)
    unique: dict[str, StoredMessage] = {}
    for m in parsed:
        unique.setdefault(m.id, m)
    existing = yield StoreCall([GetOp(messages_ns(thread_id), i) for i in unique])
    # A turn indexed by someone else (extraction indexes raw turns too) has no ``seq``: it is taken over.
    found = {
        m.id: StoredMessage.from_value(item.value)
        for m, item in zip(unique.values(), existing, strict=True)
        if item is not None and "seq" in item.value
    }
    placed = yield from _in_order(thread_id, info, {i: m.seq for i, m in found.items()})
    stored = {i: m for i, m in found.items() if i in placed}
    new = [m for m in unique.values() if m.id not in stored]
    if new:
        added = yield from _append_new(thread_id, info, new, fields, fold)
        stored.update((m.id, m) for m in added)
    return [stored[i] for i in unique]


def _append_new(
    thread_id: str,
    info: ThreadInfo,
    new: Sequence[StoredMessage],
    fields: Sequence[str],
    fold: FoldSpec | None = None,
) -> Flow[list[StoredMessage]]:
    """Number ``new`` after the thread's last message and write them, the order and the count in one batch."""
    count = info.message_count
    first_chunk = count // ORDER_CHUNK
    (chunk_item,) = yield StoreCall([GetOp(order_ns(thread_id), chunk_key(first_chunk))])
    chunks: dict[int, list[str]] = {first_chunk: list(chunk_item.value["ids"]) if chunk_item else []}
    del chunks[first_chunk][count - first_chunk * ORDER_CHUNK :]  # slots past the count were never counted
    added: list[StoredMessage] = []
    last_user = info.last_user_seq
    for m in new:
        seq = count + len(added)
        chunks.setdefault(seq // ORDER_CHUNK, []).append(m.id)
        added.append(dataclasses.replace(m, seq=seq))
        if m.role == "user":
            last_user = seq
    puts: list[PutOp] = [
        PutOp(
            messages_ns(thread_id),
            m.id,
            m.to_value(thread_id, info.user_id),
            index=list(fields) if fields else False,  # none: a worker indexes it (embed job)
        )
        for m in added
    ]
    puts += [PutOp(order_ns(thread_id), chunk_key(n), {"ids": ids}, index=False) for n, ids in chunks.items()]
    new_info = dataclasses.replace(
        info, message_count=count + len(added), last_user_seq=last_user, last_activity=added[-1].timestamp
    )
    puts += save_info(thread_id, new_info)
    if fold is not None:
        puts += yield from _fold_puts(thread_id, info, added, fold)
    yield StoreCall(puts)
    return added


def list_messages_plan(thread_id: str, last: int | None = None) -> Flow[list[StoredMessage]]:
    """The thread's messages in order (the last ``last`` when given)."""
    if last is not None:
        last = check_whole(last, "last", meaning="how many of the latest messages; None: all")
    info = yield from thread_info_plan(thread_id)
    start = 0 if last is None else info.message_count - last
    ids = yield from ids_between(thread_id, start, info.message_count)
    return (yield from messages_by_id(thread_id, ids))


def message_page_plan(thread_id: str, offset: int, limit: int) -> Flow[tuple[list[StoredMessage], int]]:
    """One page of the thread's messages (``limit`` from ``offset``) and how many the thread holds.

    Reads the thread's metadata, the order chunks that hold the page and the page's messages: a page of a
    10,000-message thread costs what a page of a short one does."""
    offset = check_whole(offset, "offset", meaning="where the page starts")
    limit = check_whole(limit, "limit", meaning="how many messages a page holds")
    info = yield from thread_info_plan(thread_id)
    ids = yield from ids_between(thread_id, offset, min(info.message_count, offset + limit))
    return (yield from messages_by_id(thread_id, ids)), info.message_count


def revision_within(thread_id: str, revision: int, boundary: int) -> Flow[Summary]:
    """The newest summary revision that covers no message at or past ``boundary``; a revision marked
    ``stale`` (it covered messages an undone ingestion removed: :mod:`remem.ingestion`) is passed over."""
    while revision > 0:
        (item,) = yield StoreCall([GetOp(summaries_ns(thread_id), chunk_key(revision))])
        if item is not None and not item.value.get("stale"):
            summary = Summary.from_value(item.value)
            if summary.covered_count <= boundary:
                return summary
        revision -= 1
    return EMPTY_SUMMARY


def summary_at(
    thread_id: str, info: ThreadInfo, boundary: int, frequency: int, fold: FoldSpec | None = None
) -> Flow[Summary]:
    """The summary of the messages before ``boundary``, extended when ``frequency`` new ones wait: from
    the thread's fold (``fold``) when it covers more of them than the last revision, else from that."""
    base = yield from revision_within(thread_id, info.summary_revision, boundary)
    waiting = boundary - base.covered_count
    if waiting <= 0 or (base.revision > 0 and waiting < frequency):
        return base
    text, first_id, last_id, model = base.text, base.first_message_id, base.last_message_id, ""
    begin = base.covered_count
    folded = None if fold is None else (yield from _read_fold(thread_id, fold))
    if folded is not None and begin < folded.covered <= boundary:
        text, first_id, last_id, begin = folded.text, folded.first_id, folded.last_id, folded.covered
        model = "extractive"
    # The backlog is read and summarised a page at a time, so memory stays bounded however long it is.
    for start in range(begin, boundary, SUMMARY_PAGE):
        ids = yield from ids_between(thread_id, start, min(start + SUMMARY_PAGE, boundary))
        messages = yield from messages_by_id(thread_id, ids)
        result: SummaryResult = yield SummarizeCall(
            text, [m.to_langchain() for m in messages], thread_id, info.user_id
        )
        text, model = result.text, result.model
        first_id = first_id or (ids[0] if ids else None)
        last_id = ids[-1] if ids else last_id
    covered = _Covered(text, first_id, last_id, model)
    saved: Summary = yield Leased(thread_id, _save_summary(thread_id, info, base, boundary, covered))
    return saved


@dataclasses.dataclass(frozen=True)
class _Covered:
    """What summarising a backlog produced: the text, the ids it spans, and the model that wrote it."""

    text: str
    first_message_id: str | None
    last_message_id: str | None
    model: str


def _save_summary(
    thread_id: str, info: ThreadInfo, base: Summary, boundary: int, covered: _Covered
) -> Flow[Summary]:
    """Store a new summary revision and count it in the thread's metadata as it is now."""
    (item,) = yield StoreCall([GetOp(meta_ns(thread_id), META_KEY)])
    current = ThreadInfo.from_value(item.value) if item is not None else info
    summary = Summary(
        text=covered.text,
        revision=current.summary_revision + 1,
        covered_count=boundary,
        first_message_id=covered.first_message_id,
        last_message_id=covered.last_message_id,
        topics=extract_topics(covered.text),
        based_on=base.revision,
        created_at=now_iso(),
        model=covered.model,
    )
    yield StoreCall(
        [
            PutOp(summaries_ns(thread_id), chunk_key(summary.revision), summary.to_value(), index=False),
            *save_info(thread_id, dataclasses.replace(current, summary_revision=summary.revision)),
        ]
    )
    return summary


def summary_plan(
    thread_id: str, except_last: int, token_budget: int, count: TextCounter, fold: FoldSpec | None = None
) -> Flow[Summary]:
    """The thread's summary of all but the last ``except_last`` messages, brought up to date."""
    check_whole(except_last, "except_last", meaning="how many of the latest messages to leave out")
    check_whole(
        token_budget, "token_budget", least=1, meaning="the most tokens the summary may take", example=1000
    )
    info = yield from thread_info_plan(thread_id)
    summary = yield from summary_at(thread_id, info, max(info.message_count - except_last, 0), 1, fold)
    text, truncated = _truncate(summary.text, token_budget, count)
    return dataclasses.replace(summary, text=text, truncated=truncated)


def summaries_plan(thread_id: str) -> Flow[list[Summary]]:
    """Every stored summary revision of the thread, oldest first."""
    info = yield from thread_info_plan(thread_id)
    keys = [chunk_key(n) for n in range(1, info.summary_revision + 1)]
    items = yield StoreCall([GetOp(summaries_ns(thread_id), key) for key in keys])
    return [Summary.from_value(item.value) for item in items if item is not None]


def _memory_of(user_id: str, memory_id: str) -> Flow[Any]:
    """The user's memory ``memory_id`` (ids checked as the layout takes them), or NotFoundError."""
    check_label(user_id, "user_id")
    check_text(memory_id, "memory_id")
    (item,) = yield StoreCall([GetOp(memories_ns(user_id), memory_id)])
    if item is None:
        raise NotFoundError(
            f"user {user_id!r} has no memory {memory_id!r}; search the user's memories for its id"
        )
    return item


def delete_memory_plan(user_id: str, memory_id: str) -> Flow[None]:
    """Delete one of the user's long-term memories (its index rows with it)."""
    yield from _memory_of(user_id, memory_id)
    yield StoreCall([PutOp(memories_ns(user_id), memory_id, None)])


def edit_memory_plan(user_id: str, memory_id: str, content: str) -> Flow[dict[str, Any]]:
    """Replace the text of one of the user's long-term memories (re-indexed); its other fields are kept."""
    if not check_text(content, "content").strip():
        raise RememUsageError("a memory needs some content; to remove it, delete it instead")
    item = yield from _memory_of(user_id, memory_id)
    value = {**item.value, "content": content, "updated_at": now_iso()}
    yield StoreCall([PutOp(memories_ns(user_id), memory_id, value, index=["content"])])
    return value
