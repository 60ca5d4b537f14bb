"""LangGraph checkpointers that store each message of a thread once: SQLite and PostgreSQL, sync and async.

    from remem.checkpoint import SqliteSaver           # was: from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string("checkpoints.db") as saver:
        graph = builder.compile(checkpointer=saver)

``checkpointer_from_url("sqlite:///app.db")`` opens the right one for a URL (``memory://``, ``sqlite:///``,
``postgresql://``), ``list_threads(saver)`` lists any saver's threads, and
``import_stock_checkpoints(stock_url, remem_url)`` copies the threads of LangGraph's stock savers in.

Each saver is a complete ``BaseCheckpointSaver`` (put, put_writes, get_tuple, list, delete_thread,
copy_thread, delete_for_runs, prune) plus ``list_threads()`` and ``stats()``. A value already stored for
a thread is not stored again and a list channel such as ``messages`` is stored as what changed, so
storage grows with what was said, not with how often it was saved. Nothing is pickled.

Drop-in: every constructor and option of the stock savers works with the same meaning (paths and URLs in
``from_conn_string``, connections and pools with any row factory, ``pipe=`` / ``pipeline=``), and user
classes in state (Pydantic models, dataclasses, enums, named tuples) come back as their classes, as on
``InMemorySaver``, without reviving anything else (see ``_serde``). Differences on purpose, each pinned
by a test in ``tests/test_checkpoint_parity.py``:

- a sync saver serves the ``a*`` methods in a worker thread (stock ``SqliteSaver`` raises
  ``NotImplementedError``);
- ``list(filter=...)`` is applied after reading, so no key reaches SQL and any key is accepted (stock
  ``SqliteSaver`` refuses odd keys with ``ValueError``); dotted keys reach nested values as there;
- metadata is kept whole, ``writes`` included (as ``InMemorySaver`` and ``SqliteSaver``; stock
  ``PostgresSaver`` drops ``writes``);
- pending sends written on a parent by LangGraph < 0.3 are not moved into the child's values (as
  ``InMemorySaver`` and ``SqliteSaver``; stock ``PostgresSaver`` moves them);
- ``get_delta_channel_history`` returns a ``None`` stored in a channel as its seed, as the base class
  says and ``InMemorySaver`` and ``SqliteSaver`` do (stock ``PostgresSaver`` cannot tell a stored JSON
  null from no value, and walks on past it);
- ``get_delta_channel_history`` asked with the config of a tuple that ``list()`` returned (as
  ``get_state_history`` asks it) answers from that listing: what the listing read, not what another
  process wrote since (a write through this saver drops the listings of its thread; see ``_delta``);
- ``get_delta_channel_history`` goes on from the last history it read of the thread when nothing that
  history was read from changed (pending writes added, a prune, a delete: all seen, from any process);
  a checkpoint put again under its own id through this saver is seen too, even by a history read running
  at that moment (``_cache.Watch``), but one put again so by another process (LangGraph never does) is not;
- the stock savers' internals (``MIGRATIONS``, ``_load_checkpoint_tuple``, ``search_where``) do not exist.

A graph whose messages are a ``DeltaChannel`` (LangGraph's beta channel that stores a snapshot every so
many updates and the writes between) takes the storage of a plain graph (a snapshot is stored as its
messages' item numbers), lists its history with the reads of a plain graph (``tests/test_checkpoint_delta.py``)
and runs a turn with about the reads of a plain graph's turn (``tests/test_checkpoint_delta_replay.py``).

This module imports no database driver: each saver's backend module is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from remem.checkpoint._base import CheckpointStats, ThreadStats
from remem.checkpoint._import import ImportReport, import_stock_checkpoints
from remem.checkpoint._open import acheckpointer_from_url, checkpointer_from_url, list_threads

if TYPE_CHECKING:
    from remem.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from remem.checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver

__all__ = [
    "AsyncPostgresSaver",
    "AsyncSqliteSaver",
    "CheckpointStats",
    "ImportReport",
    "PostgresSaver",
    "SqliteSaver",
    "ThreadStats",
    "acheckpointer_from_url",
    "checkpointer_from_url",
    "import_stock_checkpoints",
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
