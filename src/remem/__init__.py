"""remem: a memory layer for LangGraph agents."""

from remem.agent import MemoryState, UsageRecord, arun_turn, build_agent, run_turn
from remem.checkpoint import acheckpointer_from_url, checkpointer_from_url, list_threads
from remem.config import Settings, load_settings
from remem.errors import (
    BudgetExceededError,
    ConfigError,
    InvalidMessagesError,
    MissingDependencyError,
    ModelError,
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

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "ContextCard",
    "DeleteStrategy",
    "ExtractiveSummarizer",
    "FilterStrategy",
    "InvalidMessagesError",
    "LLMSummarizer",
    "Memory",
    "MemoryRecord",
    "MemoryState",
    "MissingDependencyError",
    "ModelError",
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
