"""Memory for agents: tools to remember, recall and forget, and a graph node that extracts after a turn.

    tools = create_memory_tools(store)                 # the user comes from config["configurable"]["user_id"]
    agent = create_agent(model, tools=tools, store=store)

    builder.add_node("extract", extraction_node(MemoryExtractor(model=llm), background=True))

Recalled text is returned as data (JSON with ids and sources), never as instructions.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.store.base import BaseStore

from remem.errors import RememUsageError
from remem.extraction._extractor import MemoryExtractor
from remem.extraction._schema import (
    MEMORY_KINDS,
    RECALL_TOOL_NAME,
    Candidate,
    ExtractionResult,
    memory_value,
    message_id,
)
from remem.layout import (
    EXTRACTION_STATE_KEY,
    extraction_state,
    is_thread_messages,
    threads_root,
    user_memories,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EXTRACTION_JOB",
    "JobSink",
    "create_memory_tools",
    "enqueue_extraction",
    "extraction_node",
    "run_extraction_job",
]

EXTRACTION_JOB = "extraction"  # the kind of a queued extraction job (remem.jobs runs it)


class JobSink(Protocol):
    """Where background work goes: what :class:`remem.jobs.JobQueue` supplies to this layer."""

    def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        input_key: str | None = None,
        serial_key: str | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> str: ...


def _configured(config: RunnableConfig | None, name: str, fixed: str | None) -> str:
    if fixed is not None:
        return fixed
    value = ((config or {}).get("configurable") or {}).get(name)
    if not value:
        raise RememUsageError(
            f"no {name}: pass {name}= to create_memory_tools or config['configurable']['{name}']"
        )
    return str(value)


def create_memory_tools(store: BaseStore, *, user_id: str | None = None, limit: int = 5) -> list[BaseTool]:
    """``remember``, ``recall_memories`` and ``forget_memory`` tools over a user's memories in ``store``."""

    def remember(text: str, kind: str = "fact", config: RunnableConfig = None) -> str:  # type: ignore[assignment]
        """Save one short, self-contained fact, preference, instruction or event about the user."""
        if kind not in MEMORY_KINDS:
            return f"kind must be one of {', '.join(MEMORY_KINDS)}"
        uid = _configured(config, "user_id", user_id)
        thread = ((config or {}).get("configurable") or {}).get("thread_id") or ""
        candidate = Candidate(kind=kind, text=text, confidence=1.0)  # type: ignore[arg-type]
        value = memory_value(
            candidate, user_id=uid, thread_id=str(thread), source_ids=[], source_time=None, origin="tool"
        )
        memory_id = "mem-" + uuid.uuid4().hex
        store.put(user_memories(uid), memory_id, value)
        return json.dumps({"saved": memory_id})

    def recall_memories(query: str, config: RunnableConfig = None) -> str:  # type: ignore[assignment]
        """Search the user's saved memories and past conversation turns; returns JSON records (data only)."""
        uid = _configured(config, "user_id", user_id)
        memories = store.search(user_memories(uid), query=query, filter={"valid": True}, limit=limit)
        # Only the threads' messages: their metadata and summaries live under the threads' root too.
        hits = store.search(threads_root(), query=query, filter={"user_id": uid}, limit=limit * 3)
        turns = [h for h in hits if is_thread_messages(h.namespace)][:limit]
        records = [
            {
                "id": h.key,
                "source": "memory",
                "kind": h.value.get("kind"),
                "text": h.value.get("content"),
                "score": h.score,
            }
            for h in memories
        ] + [
            {
                "id": h.key,
                "source": f"thread {h.value.get('thread_id')}",
                "role": h.value.get("role"),
                "text": h.value.get("content"),
                "score": h.score,
            }
            for h in turns
        ]
        return json.dumps({"records": records}, ensure_ascii=False)

    def forget_memory(memory_id: str, config: RunnableConfig = None) -> str:  # type: ignore[assignment]
        """Delete one saved memory of the user by its id (as returned by recall_memories)."""
        uid = _configured(config, "user_id", user_id)
        if store.get(user_memories(uid), memory_id) is None:
            return json.dumps({"deleted": None, "error": "no such memory for this user"})
        store.delete(user_memories(uid), memory_id)
        return json.dumps({"deleted": memory_id})

    return [
        StructuredTool.from_function(remember, name="remember"),
        StructuredTool.from_function(recall_memories, name=RECALL_TOOL_NAME),
        StructuredTool.from_function(forget_memory, name="forget_memory"),
    ]


def enqueue_extraction(
    queue: JobSink,
    messages: Sequence[BaseMessage],
    *,
    user_id: str,
    thread_id: str,
    store: BaseStore | None = None,
) -> str | None:
    """Queue the extraction of ``messages`` past the thread's watermark (read in ``store`` when given);
    returns the job's id, or None when there is nothing new.

    The job holds those messages (ids fixed, so a worker names them as this process would), keyed by the
    thread and its last message: queueing the same turn twice adds one job. A thread's jobs run in order.
    """
    ids = [message_id(m, thread_id, i) for i, m in enumerate(messages)]
    mark = None
    if store is not None:
        item = store.get(extraction_state(thread_id), EXTRACTION_STATE_KEY)
        mark = None if item is None else item.value.get("watermark")
    start = ids.index(mark) + 1 if mark in ids else 0
    pending = [m.model_copy(update={"id": i}) for i, m in zip(ids[start:], messages[start:], strict=True)]
    if not pending:
        return None
    payload = {"thread_id": thread_id, "user_id": user_id, "messages": messages_to_dict(pending)}
    return queue.enqueue(
        EXTRACTION_JOB,
        payload,
        input_key=f"{EXTRACTION_JOB}:{thread_id}:{ids[-1]}",
        serial_key=f"{EXTRACTION_JOB}:{thread_id}",
        user_id=user_id,
        thread_id=thread_id,
    )


def run_extraction_job(
    extractor: MemoryExtractor, payload: Mapping[str, Any], *, job_id: str, store: BaseStore | None = None
) -> ExtractionResult:
    """Run a job :func:`enqueue_extraction` queued; running it again (after a crash) does no harm: the
    watermark skips what was done and the memories it adds have ids derived from ``job_id``."""
    return extractor.run(
        messages_from_dict(list(payload["messages"])),
        user_id=str(payload["user_id"]),
        thread_id=str(payload["thread_id"]),
        store=store,
        run_key=job_id,
    )


def extraction_node(
    extractor: MemoryExtractor,
    *,
    background: bool = False,
    messages_key: str = "messages",
    queue: JobSink | None = None,
) -> Callable[..., dict[str, Any]]:
    """A graph node that runs ``extractor`` on the state's messages after a turn.

    ``thread_id`` and ``user_id`` come from ``config["configurable"]`` (user_id defaults to thread_id); the
    store is the extractor's or, if it has none, the graph's (``runtime.store``).

    With ``queue`` (a :class:`remem.jobs.JobQueue` on the store's database) the node queues a job and
    returns: the work survives a crash or a restart, a failure is retried with backoff and, failing on,
    parked with its error (``remem worker`` or :func:`remem.jobs.run_worker` runs it). With
    ``background=True`` and no queue the work runs in a thread of this process only (a crash loses it;
    ``node.wait()`` joins it); a failure is logged and leaves the watermark in place, so the next turn retries.
    """
    pool = (
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="remem-extract")
        if background and queue is None
        else None
    )
    pending: list[Future[ExtractionResult]] = []

    def node(state: dict[str, Any], config: RunnableConfig, runtime: Any = None) -> dict[str, Any]:
        configurable = config.get("configurable") or {}
        thread_id = str(configurable.get("thread_id") or "")
        if not thread_id:
            raise RememUsageError("extraction needs config['configurable']['thread_id']")
        user_id = str(configurable.get("user_id") or thread_id)
        store = extractor.store or getattr(runtime, "store", None)
        messages = list(state.get(messages_key) or [])
        if queue is not None:
            enqueue_extraction(queue, messages, user_id=user_id, thread_id=thread_id, store=store)
        elif pool is None:
            extractor.run(messages, user_id=user_id, thread_id=thread_id, store=store)
        else:
            future = pool.submit(extractor.run, messages, user_id=user_id, thread_id=thread_id, store=store)
            future.add_done_callback(_log_failure)
            pending.append(future)
        return {}

    def wait() -> list[ExtractionResult | BaseException]:
        done: list[ExtractionResult | BaseException] = []
        while pending:
            future = pending.pop(0)
            exc = future.exception()
            done.append(exc if exc is not None else future.result())
        return done

    node.wait = wait  # type: ignore[attr-defined]
    return node


def _log_failure(future: Future[ExtractionResult]) -> None:
    exc = future.exception()
    if exc is not None:
        logger.warning("background memory extraction failed: %s", exc)
