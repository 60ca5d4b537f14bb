"""The exceptions remem raises.

Every error is a ``RememError``. Errors the caller can fix (bad input, bad configuration)
are ``RememUsageError`` and also ``ValueError``; errors of the environment (a database that is
down, a model endpoint that fails) are ``RememRuntimeError``. Every message says what to do next, and
every class knows the exit code the ``remem`` command ends with (``exit_code``: 2 when the input or the
configuration is wrong, 1 otherwise; a thread or item that is not there is 1).

    RememError
    ├── ApprovalPendingError                a model call waits for a yes/no (the run paused; nothing sent)
    ├── RememUsageError (ValueError)        the caller can fix it
    │   ├── ConfigError                     a setting or URL is wrong
    │   │   └── EmbedderMismatchError       the store's vectors were made by another embedder
    │   ├── InvalidMessagesError            a message list is malformed or not provider-valid
    │   ├── NotFoundError                   a thread, checkpoint or item does not exist
    │   ├── BudgetExceededError             a token or cost budget would be passed
    │   ├── NamespaceError                  a store namespace label cannot be stored (LangGraph's too)
    │   ├── InvalidFilterError              a store search filter is malformed
    │   └── ArgumentTypeError (TypeError)   an argument has the wrong type
    └── RememRuntimeError                   the environment failed; retry or repair it
        ├── StorageError                    a database could not be reached or refused the work
        │   ├── SchemaTooNewError           a newer remem wrote the database: upgrade remem
        │   ├── ErasureIncompleteError      an erasure stopped part way; run it again to finish it
        │   └── ErasureConflictError        another run of the same erasure wrote its journal first
        ├── ThreadBusyError                 another turn or append holds the thread's lease; retry later
        ├── ModelError                      the chat model or the embedder failed
        │   ├── SummarizationError          the summariser failed; the state was left as it was
        │   ├── ExtractionError             memory extraction failed; its watermark was kept
        │   └── RateLimitError              a rate limit (ours or the provider's 429) would wait too long
        └── MissingDependencyError          an optional package is not installed
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = [
    "ApprovalPendingError",
    "ArgumentTypeError",
    "BudgetExceededError",
    "ConfigError",
    "EmbedderMismatchError",
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
    "SchemaTooNewError",
    "StaleCacheError",
    "StorageError",
    "SummarizationError",
    "ThreadBusyError",
]


class RememError(Exception):
    """Base class of every error remem raises."""

    exit_code: ClassVar[int] = 1  # what the remem command exits with when this error ends it


class ApprovalPendingError(RememError):
    """A model call is above an approval threshold: the run paused before it, and nothing was sent.

    ``estimate`` is the pause's payload (``{"kind": "remem.approval", "model": ..., "input_tokens": ...,
    "cost": ..., "thread": ..., "user": ..., "turn": ...}``). Answer with ``remem.agent.resume_turn``
    (or ``Command(resume=True/False)``): True sends the call, False ends the turn with a message saying so.
    """

    def __init__(self, message: str, *, estimate: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.estimate: dict[str, Any] = dict(estimate or {})


class RememUsageError(RememError, ValueError):
    """The caller can fix this: the input or the configuration is wrong."""

    exit_code: ClassVar[int] = 2


class ConfigError(RememUsageError):
    """A setting, a configuration file or a URL is wrong."""


class EmbedderMismatchError(ConfigError):
    """A store's vectors were made by another embedder than the one it was opened with: vectors of two
    models do not compare, even at the same dims. ``stored`` and ``configured`` describe the two."""

    def __init__(self, message: str, *, stored: str = "", configured: str = "") -> None:
        super().__init__(message)
        self.stored, self.configured = stored, configured


class InvalidMessagesError(RememUsageError):
    """A message list is malformed or would not be accepted by a model provider."""


class NotFoundError(RememUsageError):
    """A thread, checkpoint or item that was asked for does not exist."""

    exit_code: ClassVar[int] = 1  # nothing was wrong with how the command was typed


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


if TYPE_CHECKING:
    from langgraph.store.base import InvalidNamespaceError

    class NamespaceError(RememUsageError, InvalidNamespaceError):
        """A namespace label cannot be stored faithfully (also LangGraph's ``InvalidNamespaceError``)."""

else:
    # NamespaceError is also LangGraph's InvalidNamespaceError, so langgraph must be loaded to define it;
    # it is defined on first use, so that importing this module (the CLI does, for --help) stays light.
    _namespace_error_lock = threading.Lock()

    def __getattr__(name: str) -> Any:
        if name != "NamespaceError":
            raise AttributeError(f"module 'remem.errors' has no attribute {name!r}")
        with _namespace_error_lock:
            if "NamespaceError" not in globals():
                from langgraph.store.base import InvalidNamespaceError

                class NamespaceError(RememUsageError, InvalidNamespaceError):
                    """A namespace label cannot be stored faithfully (also LangGraph's
                    ``InvalidNamespaceError``)."""

                NamespaceError.__module__, NamespaceError.__qualname__ = __name__, "NamespaceError"
                globals()["NamespaceError"] = NamespaceError
        return globals()["NamespaceError"]


class InvalidFilterError(RememUsageError):
    """A search filter is malformed: its keys must be non-empty strings and its operators known."""


class ArgumentTypeError(RememUsageError, TypeError):
    """An argument has the wrong type (also a ``TypeError``, as Python's own functions raise)."""


class RememRuntimeError(RememError):
    """The environment failed: a database, a model endpoint or an installed package."""


class StorageError(RememRuntimeError):
    """A database could not be reached, or refused the work."""


class StaleCacheError(StorageError):
    """A checkpoint write that trusted the saver's cache (see :data:`remem.checkpoint._sql.GUARD_THREAD`) found
    the thread moved on in the database: its transaction wrote nothing, and the saver runs the write again the
    usual way, so a caller does not see it."""


class ErasureConflictError(StorageError):
    """Another process wrote the erasure's journal entry since this one read it (two runs of one erasure)."""


class SchemaTooNewError(StorageError):
    """The database's schema was written by a newer remem than this one; upgrade remem to use it."""


class ErasureIncompleteError(StorageError):
    """An erasure stopped part way (a failure, or compaction that could not finish); its journal entry
    stays open and the next run finishes it. ``report`` holds what was removed so far."""

    def __init__(self, message: str, *, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class ThreadBusyError(RememRuntimeError):
    """Another turn or append on the same thread held its lease past the wait; nothing was written."""


class ModelError(RememRuntimeError):
    """The chat model or the embedder failed."""


class SummarizationError(ModelError):
    """The summariser failed. The thread's state was left as it was; invoke again to retry."""


class ExtractionError(ModelError):
    """Extraction failed. The watermark was not moved: the next run retries the same messages."""


class RateLimitError(ModelError):
    """A model's rate limit (remem's ``[remem.rate_limits]``, or the provider's 429 after the retries)
    would make a call wait longer than ``rate_limit_max_wait``; nothing more was sent. ``model`` names it,
    ``wait`` is the wait in seconds that was refused (or waited in all before giving up)."""

    def __init__(self, message: str, *, model: str | None = None, wait: float | None = None) -> None:
        super().__init__(message)
        self.model, self.wait = model, wait


class MissingDependencyError(RememRuntimeError):
    """An optional package that this feature needs is not installed."""

    @classmethod
    def for_extra(cls, package: str, extra: str) -> MissingDependencyError:
        """``package`` comes with the ``extra`` that pyproject.toml declares (a test keeps them in step)."""
        return cls(f"{package} is not installed; install it with: pip install 'remem[{extra}]'")
