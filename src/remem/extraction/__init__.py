"""Extraction: conversation turned into long-term memory, with provenance, and tools for agents.

    from remem.extraction import MemoryExtractor
    extractor = MemoryExtractor(store, model=llm)          # model=None: raw turns only, no LLM needed
    result = extractor.run(messages, user_id="u1", thread_id="t1")

Each run first indexes the new user and assistant turns under ``thread_messages(thread_id)``, so
they are searchable with no model. With a model it asks for typed memories (``fact``, ``preference``,
``instruction``, ``event``) as JSON, each with a confidence and the ids of the messages it came from, then
decides per memory against similar stored ones: add, update, delete or no-op. An updated or deleted memory
is kept, marked ``valid: False`` and linked (``superseded_by`` / ``supersedes``); searches for recall filter
on ``valid``. Memories live under ``user_memories(user_id)`` with this value (namespaces: ``remem.layout``)::

    {"content", "kind", "confidence", "valid", "status", "user_id", "thread_id", "source_message_ids",
     "source_time", "extracted_at", "origin", "supersedes", "superseded_by", "invalidated_at", "invalid_reason"}

Raw turns use the memory client's message shape (``id``, ``role``, ``content``, ``timestamp``, ``thread_id``,
``user_id``); a turn already stored (by the memory client, say) is left as it is. Index ``content``.

System prompts, tool results, and messages remem derives from memory (context cards, recalls, summaries:
see :func:`remem.messages.is_derived`) are never read. ``enabled=False`` turns extraction off (turns are still
indexed). A failed run raises :class:`ExtractionError` and leaves the per-thread watermark (stored under
``extraction_state(thread_id)``) where it was, so the next run retries the same messages.

:func:`create_memory_tools` gives an agent ``remember``, ``recall_memories`` and ``forget_memory``;
:func:`extraction_node` runs an extractor after each turn, inline or in the background.
"""

from __future__ import annotations

from remem.errors import ExtractionError
from remem.extraction._extractor import MemoryExtractor
from remem.extraction._schema import (
    MEMORY_KINDS,
    Candidate,
    ExtractionResult,
    MemoryKind,
    is_extractable,
)
from remem.extraction.tools import create_memory_tools, extraction_node

__all__ = [
    "MEMORY_KINDS",
    "Candidate",
    "ExtractionError",
    "ExtractionResult",
    "MemoryExtractor",
    "MemoryKind",
    "create_memory_tools",
    "extraction_node",
    "is_extractable",
]
