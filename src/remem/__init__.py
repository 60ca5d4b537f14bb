"""remem: a memory layer for LangGraph agents."""

from remem.agent import MemoryState, UsageRecord, arun_turn, build_agent, run_turn
from remem.config import Settings, load_settings
from remem.errors import (
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
    RememError,
    RememRuntimeError,
    RememUsageError,
    StorageError,
    SummarizationError,
)
from remem.inspection import thread_history, thread_snapshot
from remem.memory import ContextCard, Memory, MemoryRecord, Summary, Thread
from remem.models import ScriptedChatModel, chat_model_from_settings
from remem.strategies import DeleteStrategy, FilterStrategy, Plan, Strategy, SummaryStrategy, TrimStrategy
from remem.summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer, summarizer_for
from remem.threads import acheckpointer_from_url, checkpointer_from_url, list_threads

__all__ = [
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
    "TrimStrategy",
    "UsageRecord",
    "acheckpointer_from_url",
    "arun_turn",
    "build_agent",
    "chat_model_from_settings",
    "checkpointer_from_url",
    "list_threads",
    "load_settings",
    "run_turn",
    "summarizer_for",
    "thread_history",
    "thread_snapshot",
]
