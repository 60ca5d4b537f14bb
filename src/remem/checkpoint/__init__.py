"""LangGraph checkpointers that store each message of a thread once: SQLite and PostgreSQL, sync and async.

    from remem.checkpoint import SqliteSaver           # was: from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string("checkpoints.db") as saver:
        graph = builder.compile(checkpointer=saver)

``checkpointer_from_url("sqlite:///app.db")`` opens the right one for a URL (``memory://``, ``sqlite:///``,
``postgresql://``), and ``list_threads(saver)`` lists any saver's threads.

Each saver is a complete ``BaseCheckpointSaver`` (put, put_writes, get_tuple, list, delete_thread,
copy_thread, delete_for_runs, prune) plus ``list_threads()`` and ``stats()``. A value already stored for
a thread is not stored again and a list channel such as ``messages`` is stored as what changed, so
storage grows with what was said, not with how often it was saved. Nothing is pickled.

This module imports no database driver: each saver's backend module is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from remem.checkpoint._base import CheckpointStats, ThreadStats
from remem.checkpoint._open import acheckpointer_from_url, checkpointer_from_url, list_threads

if TYPE_CHECKING:
    from remem.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from remem.checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver

__all__ = [
    "AsyncPostgresSaver",
    "AsyncSqliteSaver",
    "CheckpointStats",
    "PostgresSaver",
    "SqliteSaver",
    "ThreadStats",
    "acheckpointer_from_url",
    "checkpointer_from_url",
    "list_threads",
]

_BACKENDS = {
    "SqliteSaver": "remem.checkpoint.sqlite",
    "AsyncSqliteSaver": "remem.checkpoint.sqlite",
    "PostgresSaver": "remem.checkpoint.postgres",
    "AsyncPostgresSaver": "remem.checkpoint.postgres",
}


def __getattr__(name: str) -> Any:
    module = _BACKENDS.get(name)
    if module is None:
        raise AttributeError(f"module 'remem.checkpoint' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
