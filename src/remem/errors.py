"""The exceptions remem raises.

Every error is a ``RememError``. Errors the caller can fix (bad input, bad configuration)
are ``RememUsageError`` and also ``ValueError``; errors of the environment (a database that is
down, a model endpoint that fails) are ``RememRuntimeError``. Every message says what to do next.

    RememError
    ├── RememUsageError (ValueError)        the caller can fix it
    │   ├── ConfigError                     a setting or URL is wrong
    │   ├── InvalidMessagesError            a message list is malformed or not provider-valid
    │   ├── NotFoundError                   a thread, checkpoint or item does not exist
    │   └── BudgetExceededError             a token or cost budget would be passed
    └── RememRuntimeError                   the environment failed; retry or repair it
        ├── StorageError                    a database could not be reached or refused the work
        │   ├── SchemaTooNewError           a newer remem wrote the database: upgrade remem
        │   └── ErasureIncompleteError      an erasure stopped part way; run it again to finish it
        ├── ModelError                      the chat model or the embedder failed
        │   └── SummarizationError          the summariser failed; the state was left as it was
        └── MissingDependencyError          an optional package is not installed
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "ErasureIncompleteError",
    "InvalidMessagesError",
    "MissingDependencyError",
    "ModelError",
    "NotFoundError",
    "RememError",
    "RememRuntimeError",
    "RememUsageError",
    "SchemaTooNewError",
    "StorageError",
    "SummarizationError",
]


class RememError(Exception):
    """Base class of every error remem raises."""


class RememUsageError(RememError, ValueError):
    """The caller can fix this: the input or the configuration is wrong."""


class ConfigError(RememUsageError):
    """A setting, a configuration file or a URL is wrong."""


class InvalidMessagesError(RememUsageError):
    """A message list is malformed or would not be accepted by a model provider."""


class NotFoundError(RememUsageError):
    """A thread, checkpoint or item that was asked for does not exist."""


class BudgetExceededError(RememUsageError):
    """A call would pass (or, by the provider's count, passed) a token or cost budget.

    ``budget`` names it (``turn_token_budget``, ``user_day_cost_budget``...), ``limit`` and ``amount`` are
    in ``unit`` (``tokens`` or ``cost``); all None when raised with a message only.
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str | None = None,
        limit: float | None = None,
        amount: float | None = None,
        unit: str | None = None,
    ) -> None:
        super().__init__(message)
        self.budget, self.limit, self.amount, self.unit = budget, limit, amount, unit


class RememRuntimeError(RememError):
    """The environment failed: a database, a model endpoint or an installed package."""


class StorageError(RememRuntimeError):
    """A database could not be reached, or refused the work."""


class SchemaTooNewError(StorageError):
    """The database's schema was written by a newer remem than this one; upgrade remem to use it."""


class ErasureIncompleteError(StorageError):
    """An erasure stopped part way (a failure, or compaction that could not finish); its journal entry
    stays open and the next run finishes it. ``report`` holds what was removed so far."""

    def __init__(self, message: str, *, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class ModelError(RememRuntimeError):
    """The chat model or the embedder failed."""


class SummarizationError(ModelError):
    """The summariser failed. The thread's state was left as it was; invoke again to retry."""


class MissingDependencyError(RememRuntimeError):
    """An optional package that this feature needs is not installed."""

    @classmethod
    def for_extra(cls, package: str, extra: str) -> MissingDependencyError:
        return cls(f"{package} is not installed; install it with: pip install 'remem[{extra}]'")
