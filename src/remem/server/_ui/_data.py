"""What the inspector's pages read, through the service's own parts and always in the key's tenant.

Every function takes the :class:`~remem.server._services.Services` and the signed-in key's tenant, and
reads through the tenant's view (:meth:`Services.memory_for`, its store, the checkpointer under
:func:`~remem.server._tenancy.checkpoint_thread` ids, ledger rows of those ids): nothing here can name
another tenant's rows. Pages of messages read only the page
(:meth:`Thread.message_page <remem.memory.Thread.message_page>`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from remem import layout
from remem.errors import NotFoundError
from remem.memory import Memory, ThreadInfo
from remem.memory._card import ContextCard
from remem.memory._effects import SUMMARY_NODE
from remem.server._listings import all_listings, thread_id_page, unlisted_info
from remem.server._services import Services
from remem.server._tenancy import checkpoint_thread, tenant_thread
from remem.usage import Totals

__all__ = [
    "CardSection",
    "ThreadRow",
    "card_sections",
    "checkpoints",
    "jobs_of",
    "state_at",
    "thread_hits",
    "thread_infos",
    "thread_rows",
    "turn_usage",
    "usage_overview",
]

MAX_THREADS = 10_000  # listed for sorting; past it the list says it stopped


def _add(sums: dict[str, Totals], key: str, totals: Totals) -> None:
    sums[key] = sums.get(key, Totals(key)) + totals


@dataclass
class ThreadRow:
    thread_id: str
    user_id: str | None
    agent_id: str | None
    created_at: str
    messages: int
    last_activity: str
    spend: Totals = field(default_factory=Totals)


def _ledger(services: Services) -> Any:
    meter = services.memory.meter
    return None if meter is None else meter.ledger


def _thread_ids(memory: Memory) -> Iterator[str]:
    offset = 0
    while offset < MAX_THREADS:
        page = thread_id_page(memory, 1000, offset)
        yield from page
        if len(page) < 1000:
            return
        offset += 1000


def thread_infos(memory: Memory) -> list[ThreadInfo]:
    """Every thread of the memory's store (up to :data:`MAX_THREADS`) as its listing holds it (threads
    written before listings were kept read alone)."""
    infos = {info.thread_id: info for info in all_listings(memory, MAX_THREADS)}
    for thread_id in _thread_ids(memory):
        if thread_id not in infos and (info := unlisted_info(memory, thread_id)) is not None:
            infos[thread_id] = info
    return list(infos.values())


def thread_rows(services: Services, tenant: str | None) -> list[ThreadRow]:
    """Every thread of the tenant (up to :data:`MAX_THREADS`), with its last activity and its spend.

    Read from the threads' listings in one search and the ledger's totals in one query, so the cost of the
    list does not grow with a read per thread (threads written before listings existed are read alone)."""
    memory = services.memory_for(tenant)
    spend: dict[str, Totals] = {}
    ledger = _ledger(services)
    if ledger is not None:
        for totals in ledger.totals(by="thread"):
            own = tenant_thread(str(totals.key), tenant) if totals.key is not None else None
            if own is not None:
                _add(spend, own, totals)
    return [
        ThreadRow(
            thread_id=info.thread_id,
            user_id=info.user_id,
            agent_id=info.agent_id,
            created_at=info.created_at,
            messages=info.message_count,
            last_activity=info.last_activity or info.created_at,
            spend=spend.get(info.thread_id, Totals(info.thread_id)),
        )
        for info in thread_infos(memory)
    ]


THREAD_HITS = 100  # threads a search of their messages lists


def thread_hits(services: Services, tenant: str | None, text: str, user_id: str | None) -> dict[str, Any]:
    """The tenant's threads whose messages match ``text`` (the memory client's hybrid search), best first:
    thread id -> its best matching message."""
    hits = services.memory_for(tenant).search_threads(text, user_id=user_id, k=THREAD_HITS)
    return {hit.thread_id: hit for hit in hits if hit.thread_id is not None}


@dataclass(frozen=True)
class CardSection:
    name: str
    tokens: int


_SECTIONS = (
    ("note", "instructions"),
    ("topics", "topics"),
    ("summary", "summary"),
    ("relevant_information", "relevant information"),
    ("recent_messages", "recent messages"),
)


def card_sections(memory: Memory, card: ContextCard) -> list[CardSection]:
    """The card's sections in order with the tokens each takes (by the memory's own counter)."""
    found = []
    for tag, name in _SECTIONS:
        match = re.search(rf"<{tag}\b.*?</{tag}>", card.content, flags=re.DOTALL)
        if match:
            found.append(CardSection(name, memory.count_text(match.group(0))))
    return found


def _threads(services: Services, tenant: str | None) -> Any:
    from remem.server._langgraph import _Threads

    return _Threads(services, tenant)


def checkpoints(
    services: Services, tenant: str | None, thread_id: str, limit: int = 50
) -> list[dict[str, Any]]:
    """The thread's checkpoints, newest first: id, time, step, source and how many messages it held."""
    threads = _threads(services, tenant)
    out = []
    for tup in threads.saver.list(threads.config(thread_id), limit=limit):
        channels = tup.checkpoint.get("channel_values", {})
        messages = channels.get("messages")
        out.append(
            {
                "id": tup.config["configurable"]["checkpoint_id"],
                "ts": tup.checkpoint.get("ts", ""),
                "step": tup.metadata.get("step"),
                "source": tup.metadata.get("source", ""),
                "messages": len(messages) if isinstance(messages, list) else 0,
            }
        )
    return out


def state_at(services: Services, tenant: str | None, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    """The thread's state values at ``checkpoint_id`` (as the SDK's state endpoint gives them)."""
    threads = _threads(services, tenant)
    tup = threads.saver.get_tuple(threads.config(thread_id, checkpoint_id))
    if tup is None:
        raise NotFoundError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
    state: dict[str, Any] = threads.state(thread_id, tup)
    return state


def turn_usage(services: Services, tenant: str | None, thread_id: str) -> list[dict[str, Any]]:
    """Per turn of the thread: input, output and cached tokens, cost, and which summariser calls it made:
    ``summary`` (the memory client wrote a summary revision) and ``compaction`` (a summariser call of the
    graph itself, such as the agent's ``summarize_conversation``, which trims the conversation)."""
    ledger = _ledger(services)
    if ledger is None:
        return []
    stored = checkpoint_thread(thread_id, tenant)
    summarised: set[Any] = set()
    compacted: set[Any] = set()
    for event in ledger.events(thread_id=stored, kind="summariser"):
        (summarised if event.node == SUMMARY_NODE else compacted).add(event.turn)
    turns = []
    for t in ledger.totals(by="turn", thread_id=stored):
        turn = t.key[1] if isinstance(t.key, tuple) else t.key
        turns.append(
            {
                "turn": turn,
                "input": t.input_tokens,
                "output": t.output_tokens,
                "cached": t.cached_tokens,
                "cost": t.priced_cost,
                "summary": turn in summarised,
                "compaction": turn in compacted,
            }
        )
    return sorted(turns, key=lambda t: (t["turn"] is None, t["turn"] if t["turn"] is not None else 0))


def usage_overview(services: Services, tenant: str | None) -> dict[str, Any]:
    """The tenant's spend per day, model and thread, and each budget with how much of it is used."""
    from remem.usage import Budgets, day_of

    ledger = _ledger(services)
    per: dict[str, dict[str, Totals]] = {"day": {}, "model": {}}
    threads: dict[str, Totals] = {}
    users: dict[str, Totals] = {}
    today = day_of(time.time())
    if ledger is not None:
        for totals in ledger.totals(by="thread"):
            own = tenant_thread(str(totals.key), tenant) if totals.key is not None else None
            if own is None:
                continue
            _add(threads, own, totals)
            for by in ("day", "model"):
                for part in ledger.totals(by=by, thread_id=str(totals.key)):
                    _add(per[by], str(part.key), part)
        for totals in ledger.totals(by="user", day=today):
            own = tenant_thread(str(totals.key), tenant) if totals.key is not None else None
            if own is not None:
                _add(users, own, totals)
    budgets = Budgets.from_settings(services.settings)
    scopes = []
    for scope, label, spent in (
        ("thread", "thread", threads),
        ("user_day", "user today (UTC)", users),
    ):
        for unit in ("tokens", "cost"):
            limit = budgets.limit(scope, unit)  # type: ignore[arg-type]
            if not limit:
                continue
            for name, s in sorted(spent.items()):
                used = s.tokens if unit == "tokens" else s.cost
                scopes.append({"scope": label, "name": name, "unit": unit, "used": used, "limit": limit})
    limits = {
        f"{scope}_{unit}": budgets.limit(scope, unit)
        for scope in ("call", "turn", "thread", "user_day")
        for unit in ("tokens", "cost")
    }
    return {
        "day": dict(sorted(per["day"].items())),
        "model": dict(sorted(per["model"].items())),
        "thread": dict(sorted(threads.items())),
        "budgets": scopes,
        "limits": limits,
    }


def jobs_of(services: Services, tenant: str | None, limit: int = 200) -> list[Any]:
    """The queue's jobs that belong to the tenant (by their thread or user), newest first."""
    from remem.jobs import open_queue_read_only

    queue = open_queue_read_only(services.url)
    if queue is None:
        return []
    try:
        found = []
        for status in ("queued", "running", "parked"):
            found.extend(queue.jobs(status=status, limit=limit))
    finally:
        queue.close()
    return [job for job in found if owns_job(job, tenant)]


def owns_job(job: Any, tenant: str | None) -> bool:
    for value in (job.thread_id, job.user_id):
        if isinstance(value, str):
            own = tenant_thread(value, tenant)
            foreign = tenant is None and value.startswith(f"{layout.TENANTS_ROOT}:")
            return own is not None and not foreign
    return tenant is None
