"""The memory client: threads, summaries, context cards and search over a LangGraph store.

See :class:`Memory`. Cards follow the Oracle Agent Memory guide's rules (``remem.memory._card``); the
store layout is described in ``remem.memory._records``.
"""

from remem.memory._card import (
    CARD_MESSAGE_NAME,
    RECALL_MESSAGE_NAME,
    ContextCard,
    Recall,
    is_card_message,
)
from remem.memory._records import MemoryRecord, StoredMessage, Summary, ThreadInfo
from remem.memory.client import DEFAULT_CARD_TOKEN_BUDGET, Memory, Thread

__all__ = [
    "CARD_MESSAGE_NAME",
    "DEFAULT_CARD_TOKEN_BUDGET",
    "RECALL_MESSAGE_NAME",
    "ContextCard",
    "Memory",
    "MemoryRecord",
    "Recall",
    "StoredMessage",
    "Summary",
    "Thread",
    "ThreadInfo",
    "is_card_message",
]
