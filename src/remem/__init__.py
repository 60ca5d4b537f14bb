"""remem: a memory layer for LangGraph agents.

Names are imported on first use (PEP 562), so that ``import remem.cli`` (the ``remem`` command) does not load
LangGraph and LangChain before it knows it needs them: ``remem --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remem import _lazy

if TYPE_CHECKING:
    from remem.agent import (
        MemoryState,
        UsageRecord,
        aresume_turn,
        arun_turn,
        build_agent,
        resume_turn,
        run_turn,
    )
    from remem.checkpoint import acheckpointer_from_url, checkpointer_from_url, list_threads
    from remem.config import Settings, load_settings
    from remem.errors import (
        ApprovalPendingError,
        ArgumentTypeError,
        BudgetExceededError,
        ConfigError,
        ErasureConflictError,
        ErasureIncompleteError,
        ExtractionError,
        InvalidFilterError,
        InvalidMessagesError,
        MissingDependencyError,
        ModelError,
        NamespaceError,
        NotFoundError,
        RateLimitError,
        RememError,
        RememRuntimeError,
        RememUsageError,
        StorageError,
        SummarizationError,
        ThreadBusyError,
    )
    from remem.inspection import thread_history, thread_snapshot
    from remem.memory import ContextCard, Memory, MemoryRecord, Summary, Thread
    from remem.models import ScriptedChatModel, chat_model_from_settings
    from remem.strategies import (
        DeleteStrategy,
        FilterStrategy,
        Plan,
        Strategy,
        SummaryStrategy,
        TrimStrategy,
    )
    from remem.summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer, summarizer_for

# Which module defines each exported name.
_SOURCES = {
    "remem.agent": (
        "MemoryState",
        "UsageRecord",
        "aresume_turn",
        "arun_turn",
        "build_agent",
        "resume_turn",
        "run_turn",
    ),
    "remem.config": ("Settings", "load_settings"),
    "remem.errors": (
        "ApprovalPendingError",
        "ArgumentTypeError",
        "BudgetExceededError",
        "ConfigError",
        "ErasureConflictError",
        "ErasureIncompleteError",
        "ExtractionError",
        "InvalidFilterError",
        "InvalidMessagesError",
        "MissingDependencyError",
        "ModelError",
        "NamespaceError",
        "NotFoundError",
        "RateLimitError",
        "RememError",
        "RememRuntimeError",
        "RememUsageError",
        "StorageError",
        "SummarizationError",
        "ThreadBusyError",
    ),
    "remem.inspection": ("thread_history", "thread_snapshot"),
    "remem.memory": ("ContextCard", "Memory", "MemoryRecord", "Summary", "Thread"),
    "remem.models": ("ScriptedChatModel", "chat_model_from_settings"),
    "remem.strategies": (
        "DeleteStrategy",
        "FilterStrategy",
        "Plan",
        "Strategy",
        "SummaryStrategy",
        "TrimStrategy",
    ),
    "remem.summarize": ("ExtractiveSummarizer", "LLMSummarizer", "Summarizer", "summarizer_for"),
    "remem.checkpoint": ("acheckpointer_from_url", "checkpointer_from_url", "list_threads"),
}
__getattr__, __dir__ = _lazy.exports(__name__, _SOURCES, globals())


__all__ = [
    "ApprovalPendingError",
    "ArgumentTypeError",
    "BudgetExceededError",
    "ConfigError",
    "ContextCard",
    "DeleteStrategy",
    "ErasureConflictError",
    "ErasureIncompleteError",
    "ExtractionError",
    "ExtractiveSummarizer",
    "FilterStrategy",
    "InvalidFilterError",
    "InvalidMessagesError",
    "LLMSummarizer",
    "Memory",
    "MemoryRecord",
    "MemoryState",
    "MissingDependencyError",
    "ModelError",
    "NamespaceError",
    "NotFoundError",
    "Plan",
    "RateLimitError",
    "RememError",
    "RememRuntimeError",
    "RememUsageError",
    "ScriptedChatModel",
    "Settings",
    "StorageError",
    "Strategy",
    "SummarizationError",
    "Summarizer",
    "Summary",
    "SummaryStrategy",
    "Thread",
    "ThreadBusyError",
    "TrimStrategy",
    "UsageRecord",
    "acheckpointer_from_url",
    "aresume_turn",
    "arun_turn",
    "build_agent",
    "chat_model_from_settings",
    "checkpointer_from_url",
    "list_threads",
    "load_settings",
    "resume_turn",
    "run_turn",
    "summarizer_for",
    "thread_history",
    "thread_snapshot",
]
