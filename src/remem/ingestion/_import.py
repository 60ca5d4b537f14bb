"""``remem import`` as an ingestion: LangGraph's stock checkpoints copied into remem's savers, and each
thread's conversation into its memory thread (searchable, summarised), all of it undone together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from remem._url import display_url
from remem.checkpoint import ImportReport, checkpointer_from_url, import_stock_checkpoints
from remem.ingestion._journal import IngestionEntry, list_ingestions
from remem.ingestion._load import Ingestion, begin_ingestion
from remem.jobs import JobQueue
from remem.layout import THREAD_META_KEY, thread_meta
from remem.memory import Memory
from remem.messages import persistable

__all__ = ["head_of", "import_checkpoints"]

_BATCH = 500


def head_of(saver: BaseCheckpointSaver[Any], thread_id: str) -> Any:
    """The thread's latest checkpoint (root namespace) in ``saver``, or None."""
    return saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})


def import_checkpoints(
    memory: Memory,
    source_url: str,
    target_url: str,
    *,
    queue: JobQueue | None = None,
    on_checkpoint: Callable[[ImportReport], None] | None = None,
) -> tuple[ImportReport, IngestionEntry]:
    """Import the stock checkpoints at ``source_url`` into remem's savers at ``target_url`` (the database
    ``memory`` is on) as one ingestion: each thread is named in the journal before its first checkpoint
    is written; once copied, the conversation of its latest checkpoint goes into its memory thread,
    tagged with the ingestion's id. An import stopped part way is resumed, as the same ingestion, by
    importing the same source again. Its undo deletes the checkpoints of the threads it created (refused
    for a thread continued since) and the messages it added."""
    shown = display_url(source_url)
    left = [e for e in list_ingestions(memory) if e.kind == "import" and e.source == shown]
    ingestion = (
        Ingestion(memory, left[-1], queue)
        if left and left[-1].state == "open"
        else begin_ingestion(memory, kind="import", source=shown, queue=queue)
    )
    with checkpointer_from_url(target_url) as saver:

        def named(thread_id: str) -> None:  # (each save replaces ingestion.entry)
            if thread_id in ingestion.entry.imported or thread_id in ingestion.entry.threads:
                return  # named by the run this one resumes
            if head_of(saver, thread_id) is None:  # created by this import: its checkpoints are ours
                ingestion.entry.imported[thread_id] = ""
                new = memory.store.get(thread_meta(thread_id), THREAD_META_KEY) is None
                ingestion.entry.threads.setdefault(thread_id, new)
                ingestion._save()

        def copied(thread_id: str) -> None:
            if ingestion.entry.imported.get(thread_id, "") != "":
                return  # done by the run this one resumes
            head = head_of(saver, thread_id)
            if head is None:
                return
            _add_conversation(ingestion, thread_id, head)
            if thread_id in ingestion.entry.imported:
                ingestion.entry.imported[thread_id] = head.config["configurable"]["checkpoint_id"]
                ingestion._save()

        report = import_stock_checkpoints(
            source_url, target_url, on_checkpoint=on_checkpoint, on_thread=named, on_thread_done=copied
        )
    ingestion.close()
    return report, ingestion.entry


def _add_conversation(ingestion: Ingestion, thread_id: str, head: Any) -> None:
    """The turns of the checkpoint's ``messages`` (tool traffic and remem's derived messages left out)."""
    values = (head.checkpoint or {}).get("channel_values") or {}
    turns = [
        turn
        for message in values.get("messages") or []
        if isinstance(message, BaseMessage) and (turn := persistable(message)) is not None
    ]
    user = (head.metadata or {}).get("user_id")
    for start in range(0, len(turns), _BATCH):
        ingestion.add_messages(
            thread_id, turns[start : start + _BATCH], user_id=user if isinstance(user, str) and user else None
        )
