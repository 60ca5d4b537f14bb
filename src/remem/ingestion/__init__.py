"""Ingestions you can undo: a write batch from outside a turn, recorded with an id, removed as a whole.

    with begin_ingestion(memory, kind="load", source="crm-export.jsonl") as ing:
        ing.add_messages("support-42", [{"role": "user", "content": "I moved to Lyon."}], user_id="maya")
        ing.add_memories("maya", ["prefers email"])
    with begin_ingestion(memory, kind="extraction", source="backfill") as ing:
        ing.extract(MemoryExtractor(memory.store, model=llm), thread_id="support-42")   # outside a turn
    list_ingestions(memory)                       # newest last: id, kind, source, state, counts
    undo_ingestion(memory, last=True)             # or ingestion_id="ing-..."; remem ingest undo --last

What an ingestion writes carries its id: a message holds it in its metadata (``remem_ingestion``) and a
memory in its value (``ingestion``), written in the same store batch as the data, so nothing it wrote can
escape its undo, even when the load was killed half way. Its entry in the journal
(``("_remem", "ingestions")``, :func:`remem.layout.ingestions_root`) names the threads and users it
touched; a thread is named there before anything is written to it. An extraction run
(:meth:`Ingestion.extract`) also records each thread's extraction watermark as it found it, and tags the
memories it invalidates (``invalidated_by_ingestion``).

An undo removes, one step at a time:

0. **the queue** (when the undo is given one): the waiting summary refreshes of its threads and the
   extraction jobs of its messages are taken out (:func:`remem.jobs.drop_jobs_of_messages`), in the
   queue's own transaction (a run killed before the step's mark redoes it; those jobs are then not counted).
1. **each thread** it wrote to, under the thread's lease: the messages it added (their vector and keyword
   rows go with them), the thread's order renumbered without them, the thread's counts, and every summary
   revision that covered one of them marked ``stale`` (the next ``get_summary`` or card builds from the
   revision before it; a card is built from summaries, so cards follow). A thread the ingestion created
   and that holds nothing else is removed whole. The extraction watermark moves back before them.
2. **each user** whose memories it may have changed: the memories it loaded, the memories extracted from
   the messages it added (any source among them), and a memory those had superseded (or an extraction
   run of it contradicted) made valid again. An extraction run's watermark goes back where it was.
3. **close**: the entry is ``undone``, with its totals.

Each step commits together with its mark in the entry (one store batch), so a run killed at any point
leaves an entry in state ``undoing`` that the next ``undo`` of the same ingestion goes on from, at the
first step not done, with exact totals. Undo is the journaled pattern of :mod:`remem.erasure`, on the
store (so it runs on every backend the memory client does).

An import of stock checkpoints (:func:`import_checkpoints`, ``remem import``) records the threads whose
checkpoints it created with their head after the import; its undo deletes those threads' checkpoints in
each thread step (before the step's mark: deleting again is a no-op), and refuses, before changing anything,
when one of them went on after the import. Not covered: the checkpoints it added to a thread remem already
had (kept), and a job a worker is running when the undo starts (it finishes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from remem import _lazy

if TYPE_CHECKING:
    from remem.ingestion._import import import_checkpoints
    from remem.ingestion._journal import (
        MEMORY_TAG,
        MESSAGE_TAG,
        IngestionEntry,
        UndoReport,
        forget_in_journal,
        get_ingestion,
        list_ingestions,
    )
    from remem.ingestion._load import Ingestion, begin_ingestion
    from remem.ingestion._undo import undo_ingestion

# Names are imported on first use: every erasure calls forget_in_journal, and loading the rest (the memory
# client, extraction's schema with LangChain's models) would make each ``remem forget`` pay for them.
_SOURCES: dict[str, tuple[str, ...]] = {
    "remem.ingestion._import": ("import_checkpoints",),
    "remem.ingestion._journal": (
        "MEMORY_TAG",
        "MESSAGE_TAG",
        "IngestionEntry",
        "UndoReport",
        "forget_in_journal",
        "get_ingestion",
        "list_ingestions",
    ),
    "remem.ingestion._load": ("Ingestion", "begin_ingestion"),
    "remem.ingestion._undo": ("undo_ingestion",),
}
__getattr__, __dir__ = _lazy.exports(__name__, _SOURCES, globals())

__all__ = [
    "MEMORY_TAG",
    "MESSAGE_TAG",
    "Ingestion",
    "IngestionEntry",
    "UndoReport",
    "begin_ingestion",
    "forget_in_journal",
    "get_ingestion",
    "import_checkpoints",
    "list_ingestions",
    "undo_ingestion",
]

_on_step: Callable[[str], None] | None = None
"""Called with each undo step's name ("thread:T", "user:U", "closed") once it has committed: the seam crash
tests use to stop a real process at a chosen point. Leave it None."""
