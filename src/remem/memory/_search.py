"""The memory client's search, recall and context card as flows (see ``_effects``): all logic, no I/O.

A search asks the store for memories and messages of the thread and its user, merges them by rank, and
dates questions with time words from the thread's own messages; a card adds the thread's summary and its
recent messages within a token budget.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from langgraph.store.base import GetOp, SearchItem, SearchOp

from remem.errors import RememUsageError
from remem.layout import is_thread_messages, thread_id_of, threads_root
from remem.memory._args import check_filter, check_text, check_types, check_whole
from remem.memory._card import (
    CardParts,
    ContextCard,
    Recall,
    check_card_arguments,
    diversify,
    render_card,
    render_recall,
)
from remem.memory._effects import Flow, StoreCall, together
from remem.memory._plans import (
    FoldSpec,
    TextCounter,
    ids_between,
    messages_by_id,
    revision_within,
    summary_at,
    thread_info_plan,
)
from remem.memory._records import (
    META_KEY,
    ORDER_CHUNK,
    MemoryRecord,
    StoredMessage,
    ThreadInfo,
    check_label,
    chunk_key,
    memories_ns,
    messages_ns,
    meta_ns,
    order_ns,
    parse_timestamp,
    record_from_memory,
    record_from_message,
)
from remem.memory._when import TimeQuery, around_event, needs_now, time_query
from remem.messages.words import is_chit_chat, query_text

__all__ = [
    "CARD_RECORDS",
    "THREAD_SEARCH_HITS",
    "context_card_plan",
    "descending",
    "recall_plan",
    "search_plan",
    "summary_record",
    "thread_search_plan",
]

DIVERSE_TOP = 16
"""How many of a diverse search's first records are picked by maximal marginal relevance."""
THREAD_SEARCH_HITS = 5
"""Hits read per thread asked for when searching threads (a thread often holds several)."""
_HIDDEN_STATUSES = frozenset({"deleted", "erased", "invalid", "superseded"})
T = TypeVar("T")


def _matches(record: MemoryRecord, metadata_filter: Mapping[str, Any] | None) -> bool:
    return not metadata_filter or all(record.metadata.get(k) == v for k, v in metadata_filter.items())


def _latest_time(thread_id: str) -> Flow[dt.datetime | None]:
    """When the thread's latest message was said (None for an empty or unknown thread)."""
    (item,) = yield StoreCall([GetOp(meta_ns(thread_id), META_KEY)])
    if item is None:
        return None
    count = ThreadInfo.from_value(item.value).message_count
    ids = yield from ids_between(thread_id, count - 1, count)
    found = yield from messages_by_id(thread_id, ids)
    return parse_timestamp(found[0].timestamp) if found else None


def _event_time(thread_id: str, event: str, exclude: frozenset[str]) -> Flow[dt.datetime | None]:
    """When the thread's best match for ``event`` ("the trip") was said, for "before/after the trip"."""
    (items,) = yield StoreCall([SearchOp(messages_ns(thread_id), query=event, limit=1 + len(exclude))])
    for item in items:
        if item.key not in exclude:
            return parse_timestamp(str(item.value.get("timestamp", "")))
    return None


def _time_of(question: str, thread_id: str | None, exclude: frozenset[str]) -> Flow[TimeQuery]:
    """The time words of ``question``, dated from the thread's latest message (see ``_when``)."""
    now = (yield from _latest_time(thread_id)) if thread_id is not None and needs_now(question) else None
    found = time_query(question, now)
    if found.event and thread_id is not None:
        anchor = yield from _event_time(thread_id, found.event, exclude)
        if anchor is not None:
            found = around_event(found, anchor)
    return found


def _by_rank(lists: Sequence[Sequence[MemoryRecord]]) -> list[MemoryRecord]:
    """Records of several searches in one ranking, each search's own order kept; each id once.

    Where every search is ordered by its scores (LangGraph's stores: similarity), the records are merged
    by score, ties by id. A remem store orders hybrid hits by fused rank and reports their similarity as
    ``score``, so scores do not say the order: then they are merged rank by rank (a memory before a
    message at the same rank), ties by id."""
    by_score = all(all(a.score >= b.score for a, b in itertools.pairwise(records)) for records in lists)
    merged = sorted(
        (
            (-r.score if by_score else rank, -kind, r.id, r)
            for kind, records in enumerate(lists)
            for rank, r in enumerate(records)
        ),
        key=lambda t: (t[0], t[1], t[2]),
    )
    seen: set[str] = set()
    out: list[MemoryRecord] = []
    for *_, record in merged:
        if record.id not in seen:
            seen.add(record.id)
            out.append(record)
    return out


CARD_DEAL = "f"
"""How a card's candidates are ordered before they are placed (:func:`deal`): ``"f"``, the fused order
alone; ``"fkv"``: places dealt in turn from the fused order, the keyword side's own and the vector
side's. Chosen leave-one-set-out with ``CARD_NEIGHBOURS`` and ``_card.RECORD_MAX_TOKENS`` (the card table
of ``bench/retrieval.py``): on BEAM's and REALTALK's first chats every fold chose the fused order; on
REALTALK's 10 chats and BEAM's first 6 the folds leaving out the multilingual and eval-generated sets chose
"fkv" (BEAM 73.8 against 72.0, REALTALK 77.8 against 77.0, but 0.7 and 0.9 point less on the sets left
out), so the default stays."""


def deal(ranked: Sequence[MemoryRecord], pattern: str) -> list[MemoryRecord]:
    """``ranked`` (the fused order) reordered so that each side's best records come early: place after
    place taken in turn from the orders ``pattern`` names (``f`` fused, ``k`` keyword, ``v`` vector, by
    the ranks each side gave in the store's ``signals``), skipping records taken; then the rest in fused
    order. A record one side ranks high and the other misses is not left below the fused top."""
    if set(pattern) <= {"f"}:
        return list(ranked)
    orders = {
        "f": list(ranked),
        "k": sorted(
            (r for r in ranked if "keyword_rank" in r.signals), key=lambda r: r.signals["keyword_rank"]
        ),
        "v": sorted(
            (r for r in ranked if "vector_rank" in r.signals), key=lambda r: r.signals["vector_rank"]
        ),
    }
    at = dict.fromkeys(orders, 0)
    out: list[MemoryRecord] = []
    taken: set[str] = set()
    while len(out) < len(ranked):
        moved = False
        for side in pattern:
            order = orders[side]
            while at[side] < len(order) and order[at[side]].id in taken:
                at[side] += 1
            if at[side] < len(order):
                out.append(order[at[side]])
                taken.add(out[-1].id)
                moved = True
        if not moved:
            break
    return [*out, *(r for r in ranked if r.id not in taken)]


def search_plan(
    query: str,
    *,
    user_id: str | None,
    thread_id: str | None,
    types: Sequence[str] | None,
    k: int,
    exclude: frozenset[str] = frozenset(),
    metadata_filter: Mapping[str, Any] | None = None,
    diverse: bool = False,
    only_matches: bool = False,
    sides: str = "f",
) -> Flow[list[MemoryRecord]]:
    """Hybrid search over a thread's messages and a user's long-term memories, best first.

    ``only_matches`` (:meth:`Memory.search`): only records that match, each with a ``score`` that says the
    order (see :func:`_matches_only`), and the thread's latest summary as a ``"summary"`` record when it
    holds a word of the query. Without it (cards, recall) every candidate comes, ranked.

    The query's greetings and chit-chat weigh nothing (``remem.messages.words.query_text``): they are
    left out, and a query of nothing else finds nothing. A date it names ("8 May 2023", "May") matches
    the date the index holds with each message; its time words (``_when``: "last May", "in 2022", "two
    weeks ago", "before the trip") are read into a range of dates, and the records said within it come
    first. (Adding the range's date words to the query was tried: they pulled every message of those
    dates up the vector ranking, the question's subject lost.) ``diverse`` picks the first ``DIVERSE_TOP`` records
    by maximal marginal relevance among twice as many candidates, the rest in rank order (for cards
    and recall, where near-copies waste the budget)."""
    check_text(query, "query")
    k = check_whole(k, "k", meaning="how many records to return")
    if user_id is None and thread_id is None:
        raise RememUsageError("search needs user_id=..., thread_id=... or both: say whose memory to search")
    for label, name in ((user_id, "user_id"), (thread_id, "thread_id")):
        if label is not None:
            check_label(label, name)
    types = check_types(types)
    metadata_filter = check_filter(metadata_filter)
    if k == 0 or not query.strip():
        return []
    when = yield from _time_of(query, thread_id, exclude)
    text = query_text(when.subject if when.has_range else query)
    if not text and not when.terms:
        return []
    wanted = None if types is None else frozenset(types)
    limit = k + len(exclude) + (3 * k if (metadata_filter or wanted) else 0) + (k if diverse else 0)
    ops: list[SearchOp] = []
    kinds: list[str] = []
    for namespace, kind in ((messages_ns, "message"), (memories_ns, "memory")):
        owner = thread_id if kind == "message" else user_id
        if owner is None or (
            wanted is not None and not (wanted - {"message"} if kind == "memory" else "message" in wanted)
        ):
            continue
        if text:
            ops.append(SearchOp(namespace(owner), query=text, limit=limit))
            kinds.append(kind)
        if kind == "message" and when.terms:  # the messages of those dates, by the date indexed with each
            # (deeper: the date is in the keyword document alone, and hybrid search deals the keyword side
            # every second place at most)
            ops.append(SearchOp(namespace(owner), query=" ".join(when.terms), limit=max(2 * limit, 10)))
            kinds.append("dated")
    if not ops:
        return []
    results: list[list[SearchItem]] = yield StoreCall(ops)
    lists: list[list[MemoryRecord]] = []
    dated: list[MemoryRecord] = []
    matched = _matched(results)
    for kind, items in zip(kinds, results, strict=True):
        found: list[MemoryRecord] = []
        for item in items:
            where = (item.namespace[-1], item.key)
            if only_matches and where not in matched:
                continue
            signals = dict(getattr(item, "scores", None) or {})
            if kind == "memory":
                record = record_from_memory(item.key, item.value, item.score, signals)
            else:
                record = record_from_message(item.value, item.score, signals)
            if record.id in exclude or record.status in _HIDDEN_STATUSES:
                continue
            if wanted is not None and record.type not in wanted:
                continue
            if only_matches:
                record = dataclasses.replace(record, score=matched[where])
            if _matches(record, metadata_filter):
                found.append(record)
        if kind == "dated":
            dated = found
        else:
            lists.append(found)
    ranked = deal(_by_rank(lists), sides)
    if when.has_range:  # said within the dates asked about: first, in their order, then the others
        inside: dict[str, MemoryRecord] = {}
        for r in (*ranked, *dated):
            if r.id not in inside and when.contains(parse_timestamp(r.timestamp)):
                inside[r.id] = r
        ranked = [*inside.values(), *(r for r in ranked if r.id not in inside)]
    if only_matches:
        summary = yield from _summary_match(query, thread_id, wanted)
        return descending([*ranked, *([summary] if summary is not None else [])])[:k]
    if not diverse:
        return ranked[:k]
    # The first records by maximal marginal relevance, picked among twice as many; the rest in rank order
    # (past the first few, diversity changes little and costs the most).
    top = min(k, DIVERSE_TOP)
    picked = diversify(ranked[: 2 * top], top)
    ids = {r.id for r in picked}
    return [*picked, *(r for r in ranked if r.id not in ids)][:k]


def _matched(results: Sequence[Sequence[SearchItem]]) -> dict[tuple[str, str], float]:
    """The hits of each search that match its query (:func:`_matching`), with their scores (by kind, key)."""
    return {(item.namespace[-1], item.key): score for items in results for item, score in _matching(items)}


def _matching(items: Sequence[SearchItem]) -> list[tuple[SearchItem, float]]:
    """The hits of one search that match its query, with the score that orders them.

    A hit matches when it holds a word of the query (its keyword score is above 0: stems, accents and CJK
    bigrams as the keyword index reads them), or the fusion ranks it above such a hit (a near-paraphrase
    the vector side lifts). A hit that shares no word with the query and ranks below every one that does
    is no match, however similar the embedder finds it. Where the store reports no keyword score (a stock
    store, or ``search_mode="vector"``), every hit matches, as in LangGraph. The score is the fused value
    where the store gives one (what the hybrid order follows), else the hit's own score."""
    scores = [getattr(item, "scores", None) or {} for item in items]
    if not any("keyword" in s or "fused" in s for s in scores):
        kept = len(items)
    else:
        holding = [i for i, s in enumerate(scores) if s.get("keyword", 0.0) > 0]
        kept = holding[-1] + 1 if holding else 0
    return [
        (item, float(s.get("fused", item.score or 0.0)))
        for item, s in zip(items[:kept], scores, strict=False)
    ]


def thread_search_plan(query: str, *, user_id: str | None, k: int) -> Flow[list[MemoryRecord]]:
    """The threads whose messages match ``query`` (as :func:`_matching` says), best first: each thread's
    best message as a record, at most ``k`` threads; ``user_id``: only that user's messages. One search."""
    check_text(query, "query")
    k = check_whole(k, "k", meaning="how many threads to return")
    if user_id is not None:
        check_label(user_id, "user_id")
    text = query_text(query)
    if k == 0 or not text:
        return []
    where = None if user_id is None else {"user_id": user_id}
    op = SearchOp(threads_root(), filter=where, query=text, limit=k * THREAD_SEARCH_HITS)
    (items,) = yield StoreCall([op])
    best: dict[str, MemoryRecord] = {}
    for item, score in _matching(items):
        namespace = tuple(item.namespace)
        thread_id = thread_id_of(namespace)
        if thread_id is None or thread_id in best or not is_thread_messages(namespace):
            continue
        signals = dict(getattr(item, "scores", None) or {})
        record = record_from_message(item.value, score, signals)
        best[thread_id] = dataclasses.replace(record, thread_id=thread_id)
    return descending(list(best.values()))[:k]


def _summary_match(
    query: str, thread_id: str | None, wanted: frozenset[str] | None
) -> Flow[MemoryRecord | None]:
    """The thread's latest summary as a record, when it holds a word of ``query``."""
    if thread_id is None or (wanted is not None and "summary" not in wanted):
        return None
    (meta,) = yield StoreCall([GetOp(meta_ns(thread_id), META_KEY)])
    if meta is None:
        return None
    info = ThreadInfo.from_value(meta.value)
    summary = yield from revision_within(thread_id, info.summary_revision, info.message_count)  # not stale
    if summary.revision <= 0:
        return None
    return summary_record(summary.text, query, thread_id, summary.revision)


def summary_record(text: str, query: str, thread_id: str, revision: int) -> MemoryRecord | None:
    """A thread's summary ``text`` as a search record, when it holds a word of ``query`` (as the keyword
    index reads words); its score is the share of the query's words it holds."""
    from remem.store._text import index_terms, query_terms

    terms = set(query_terms(query))
    held = terms & set(index_terms(text)) if text else set()
    if not held:
        return None
    return MemoryRecord(
        id=f"summary:{revision}",
        type="summary",
        content=text,
        score=len(held) / len(terms),
        thread_id=thread_id,
    )


def descending(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """``records`` in their order, each score capped by the one before it: records moved up for the dates
    asked about (or the summary, after the others) take the lower of their own score and the previous
    one, so scores never rise down the list and ``score > x`` keeps a head of it."""
    out: list[MemoryRecord] = []
    ceiling = float("inf")
    for record in records:
        ceiling = min(ceiling, record.score)
        out.append(record if record.score == ceiling else dataclasses.replace(record, score=ceiling))
    return out


def _latest_user_message(thread_id: str, info: ThreadInfo) -> Flow[StoredMessage | None]:
    if info.last_user_seq < 0:
        return None
    ids = yield from ids_between(thread_id, info.last_user_seq, info.last_user_seq + 1)
    found = yield from messages_by_id(thread_id, ids)
    return found[0] if found else None


CARD_NEIGHBOURS = "exchange"
"""Which turns beside a message hit come with it into a card (placed next to it, charged to the budget):
``"exchange"``, the other half of its question and answer (``_exchange``); ``"partner"``: that turn (a
reply's question, anyone else's answer) whenever it says something; ``"next"``: the turn after it;
``"both"``: the turns before and after it (each only if it says something). Chosen leave-one-set-out
(see ``CARD_DEAL``): every fold chose "exchange"; "both" showed the evidence as often on REALTALK and
the multilingual set and 8 points less often on BEAM, whose long neighbours take the room of hits."""


def _neighbour_seqs(record: MemoryRecord, mode: str) -> tuple[int, ...]:
    """The places of the turns that come with a message hit (``CARD_NEIGHBOURS``)."""
    if record.type != "message" or record.seq < 0 or record.role in ("system", "tool"):
        return ()
    if mode == "both":
        return (record.seq - 1, record.seq + 1)
    if mode == "next":
        return (record.seq + 1,)
    return (record.seq - 1 if record.role == "assistant" else record.seq + 1,)


def _exchange(hit: MemoryRecord, neighbour: MemoryRecord) -> bool:
    """Whether ``neighbour`` completes ``hit`` as a question and its answer: one of them asks, and the
    neighbour says something (a "Thanks for sharing!" after a statement is no evidence)."""
    asks = "?" in hit.content or "?" in neighbour.content
    return asks and _says_something(neighbour)


def _says_something(record: MemoryRecord) -> bool:
    return not is_chit_chat(record.content.split(": ", 1)[-1])


def _with_neighbours(
    thread_id: str,
    info: ThreadInfo,
    records: Sequence[MemoryRecord],
    exclude: frozenset[str],
    mode: str = "exchange",
) -> Flow[list[list[MemoryRecord]]]:
    """Each record with the turns beside it that come along (``CARD_NEIGHBOURS``: by default the
    neighbouring turn of its exchange, when the two make a question and its answer), when those turns
    are in the thread and not excluded; two reads for all of them."""
    seqs = {r.id: [s for s in _neighbour_seqs(r, mode) if 0 <= s < info.message_count] for r in records}
    numbers = sorted({s // ORDER_CHUNK for found in seqs.values() for s in found})
    chunks: dict[int, list[str]] = {}
    if numbers:
        items = yield StoreCall([GetOp(order_ns(thread_id), chunk_key(n)) for n in numbers])
        chunks = {n: item.value["ids"] if item else [] for n, item in zip(numbers, items, strict=True)}
    neighbour_ids: dict[str, list[str]] = {}
    for record_id, found in seqs.items():
        for seq in found:
            ids = chunks.get(seq // ORDER_CHUNK, [])
            if seq % ORDER_CHUNK < len(ids) and ids[seq % ORDER_CHUNK] not in exclude:
                neighbour_ids.setdefault(record_id, []).append(ids[seq % ORDER_CHUNK])
    wanted = sorted({i for found in neighbour_ids.values() for i in found})
    neighbours: dict[str, MemoryRecord] = {}
    if wanted:
        items = yield StoreCall([GetOp(messages_ns(thread_id), i) for i in wanted])
        neighbours = {
            i: record_from_message(item.value, 0.0) for i, item in zip(wanted, items, strict=True) if item
        }
    groups: list[list[MemoryRecord]] = []
    for r in records:
        group = [r]
        for i in neighbour_ids.get(r.id, []):
            n = neighbours.get(i)
            if n is None or n.id == r.id:
                continue
            if _exchange(r, n) if mode == "exchange" else _says_something(n):
                group.append(n)
        groups.append(group)
    return groups


CARD_RECORDS = 48
"""How many relevant records a card considers when no ``max_relevant_results`` is given (at least; one
per 40 tokens of a bigger budget): it holds as many of them as its budget allows, best first."""


def _done(value: T) -> Flow[T]:
    """A flow that has its result already (for :func:`together`)."""
    return value
    yield  # a generator that asks for nothing


def context_card_plan(
    thread_id: str,
    *,
    except_last_messages: int,
    max_recent_messages: int,
    max_relevant_results: int | None,
    token_budget: int,
    types: Sequence[str] | None,
    metadata_filter: Mapping[str, Any] | None,
    query: str | None,
    count: TextCounter,
    extend_summary: bool = True,
    fold: FoldSpec | None = None,
) -> Flow[ContextCard]:
    """Build the thread's context card (see ``_card`` for the rules and the layout). ``extend_summary``
    False: the summary is the newest stored revision that fits, never extended, so the plan writes nothing."""
    check_card_arguments(except_last_messages, max_recent_messages, max_relevant_results, token_budget)
    check_text(query, "query", optional=True)
    types, metadata_filter = check_types(types), check_filter(metadata_filter)
    info = yield from thread_info_plan(thread_id)
    n = info.message_count
    boundary = max(n - max(except_last_messages, max_recent_messages), 0)
    if extend_summary:
        summarised = summary_at(thread_id, info, boundary, info.context_summary_update_frequency, fold)
    else:
        summarised = revision_within(thread_id, info.summary_revision, boundary)
    # Independent reads go together (one batch each step): the tail's ids with the summary, the
    # tail's messages with the latest user message or with the search.
    tail_ids, summary = yield from together(ids_between(thread_id, boundary, n), summarised)
    recent_read = messages_by_id(thread_id, tail_ids[-max_recent_messages:] if max_recent_messages else [])
    exclude = set(tail_ids)
    if query is None:
        recent, latest = yield from together(recent_read, _latest_user_message(thread_id, info))
        recent_read = _done(recent)
        if latest is not None:
            query = latest.content
            exclude.add(latest.id)
    k = max(CARD_RECORDS, token_budget // 40) if max_relevant_results is None else max_relevant_results
    searched = bool(k and query and query.strip())
    searching: Flow[list[MemoryRecord]] = _done([])
    if searched and query is not None:
        searching = search_plan(
            query,
            user_id=info.user_id,
            thread_id=thread_id,
            types=types,
            k=k,
            exclude=frozenset(exclude),
            metadata_filter=metadata_filter,
            diverse=True,
            sides=CARD_DEAL,
        )
    recent, records = yield from together(recent_read, searching)
    groups: list[list[MemoryRecord]] = []
    if searched:
        if types is None and not metadata_filter:  # a neighbour is shown only where any message may be
            groups = yield from _with_neighbours(
                thread_id, info, records, frozenset(exclude), CARD_NEIGHBOURS
            )
        else:
            groups = [[r] for r in records]
    parts = CardParts(
        topics=summary.topics,
        summary=summary.text,
        summary_revision=summary.revision,
        records=tuple(r for g in groups for r in g[:1]),
        recent=tuple(recent),
    )
    content, kept = render_card(parts, token_budget, count, groups, query)
    return ContextCard(
        content=content,
        topics=kept.topics,
        summary=kept.summary,
        summary_revision=kept.summary_revision if kept.summary else 0,
        records=kept.records,
        recent=kept.recent,
        token_count=count(content) if content else 0,
        excluded_message_ids=tuple(tail_ids),
    )


def recall_plan(
    thread_id: str,
    query: str,
    *,
    k: int,
    exclude: frozenset[str],
    types: Sequence[str] | None,
    token_budget: int,
    count: TextCounter,
) -> Flow[Recall]:
    """The records of this thread and its user that match ``query``, except ``exclude`` (already seen)."""
    check_text(query, "query")
    k = check_whole(k, "k", meaning="how many records to recall")
    check_whole(
        token_budget, "token_budget", least=1, meaning="the most tokens the recall may take", example=400
    )
    info = yield from thread_info_plan(thread_id)
    records = yield from search_plan(
        query, user_id=info.user_id, thread_id=thread_id, types=types, k=k, exclude=exclude, diverse=True
    )
    return render_recall(records, token_budget, count, query)
