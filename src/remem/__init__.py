"""remem: a memory layer for LangGraph agents."""

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

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "InvalidMessagesError",
    "MissingDependencyError",
    "ModelError",
    "NotFoundError",
    "RememError",
    "RememRuntimeError",
    "RememUsageError",
    "Settings",
    "StorageError",
    "SummarizationError",
    "load_settings",
]
