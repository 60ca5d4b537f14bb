"""Import the threads of LangGraph's stock ``SqliteSaver`` / ``PostgresSaver`` into remem's savers.

    from remem.checkpoint import import_stock_checkpoints
    report = import_stock_checkpoints("sqlite:///old.db", "sqlite:///.remem/remem.db")

Every thread, every checkpoint (namespaces, parents, metadata) and every pending write is copied, oldest
checkpoint first, through the stock saver's own reading code and remem's ``put`` / ``put_writes``, so
``get_state_history`` of a graph on the target equals the one on the source.

- Bounded memory: threads are read a page at a time, and a thread's checkpoints one at a time (only
  their ids are listed).
- Resumable: a thread whose checkpoints are partly in the target continues from its newest one there
  (re-putting a checkpoint or a write is idempotent), so a killed import is finished by running it again.
- Values are decoded by remem's serializer: classes that are not imported in the importing process come
  over as their data (a dict); import from code that imports them to keep them as classes.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from remem._url import display_url, parse_database_url
from remem.checkpoint._open import checkpointer_from_url
from remem.checkpoint._serde import RememSerializer
from remem.errors import ConfigError, NotFoundError, RememError, StorageError

__all__ = ["ImportReport", "import_stock_checkpoints"]

_THREAD_PAGE = 500
_Run = Callable[[str, tuple[Any, ...]], list[Any]]


@dataclass
class ImportReport:
    """What an import copied: threads, checkpoints and pending writes (skipped: already in the target)."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    skipped: int = 0


class _Source:
    """The stock database: its raw tables for ids, the stock saver for everything else."""

    def __init__(self, saver: BaseCheckpointSaver[Any], run: _Run, writes_table: str, url: str) -> None:
        self.saver = saver
        self.run = run
        self.writes_table = writes_table
        self.shown = display_url(url)
        try:
            run("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints LIMIT 1", ())
        except Exception:
            raise NotFoundError(
                f"{display_url(url)} holds no LangGraph stock checkpoints (no 'checkpoints' table); check the URL"
            ) from None

    def threads(self) -> Iterator[str]:
        after = ""
        while True:
            rows = self.run(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > ? ORDER BY thread_id LIMIT ?",
                (after, _THREAD_PAGE),
            )
            yield from (str(r[0]) for r in rows)
            if len(rows) < _THREAD_PAGE:
                return
            after = str(rows[-1][0])

    def checkpoint_ids(self, thread_id: str) -> list[tuple[str, str]]:
        rows = self.run(
            "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id",
            (thread_id,),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def task_paths(self, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, str]:
        rows = self.run(
            f"SELECT task_id, task_path FROM {self.writes_table} WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
            (thread_id, ns, checkpoint_id),
        )
        return {str(r[0]): str(r[1] or "") for r in rows}


@contextmanager
def _open_source(url: str) -> Iterator[_Source]:
    parsed = parse_database_url(url)
    serde = RememSerializer()
    if parsed.kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver as StockSqliteSaver

        path = Path(parsed.target)
        if not path.is_file():
            raise NotFoundError(f"there is no database at {path}; check the source URL")
        conn = sqlite3.connect(
            f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro", uri=True, check_same_thread=False
        )
        try:

            def run(sql: str, params: tuple[Any, ...]) -> list[Any]:
                return conn.execute(sql, params).fetchall()

            stock = StockSqliteSaver(conn, serde=serde)
            stock.is_setup = True  # reading only: the stock setup() would write
            yield _Source(stock, run, "writes", url)
        finally:
            conn.close()
    elif parsed.kind == "postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver as StockPostgresSaver
        from psycopg.rows import dict_row, tuple_row

        from remem.checkpoint.postgres import _unreachable

        try:
            pg = psycopg.connect(parsed.target, autocommit=True, row_factory=dict_row, connect_timeout=10)
        except psycopg.Error as exc:
            raise _unreachable(parsed.target, exc) from None
        with pg:

            def prun(sql: str, params: tuple[Any, ...]) -> list[Any]:
                with pg.transaction(), pg.cursor(row_factory=tuple_row) as cur:
                    cur.execute(sql.replace("?", "%s"), params)
                    return cur.fetchall()

            yield _Source(StockPostgresSaver(pg, serde=serde), prun, "checkpoint_writes", url)
    else:
        raise ConfigError(
            "memory:// keeps nothing to import; give the stock database's sqlite:/// or postgresql:// URL"
        )


def import_stock_checkpoints(
    source_url: str,
    target_url: str,
    *,
    on_checkpoint: Callable[[ImportReport], None] | None = None,
    on_thread: Callable[[str], None] | None = None,
    on_thread_done: Callable[[str], None] | None = None,
) -> ImportReport:
    """Copy every thread of the stock saver database at ``source_url`` into remem's saver at ``target_url``.

    The two may be one PostgreSQL database or one SQLite file (the tables differ). ``on_checkpoint`` is
    called after each checkpoint (progress); ``on_thread`` with a thread's id before anything of it is
    written, ``on_thread_done`` once all of it is (an ingestion names and follows its threads through
    them: :func:`remem.ingestion.import_checkpoints`). Run it again after a failure: it continues where
    it stopped.
    """
    report = ImportReport()
    with _open_source(source_url) as source, checkpointer_from_url(target_url) as target:
        if not callable(getattr(target, "stats", None)):
            raise ConfigError("import into a remem database: give a sqlite:/// or postgresql:// target URL")
        for thread_id in source.threads():
            if on_thread is not None:
                on_thread(thread_id)
            _import_thread(source, target, thread_id, report, on_checkpoint)
            report.threads += 1
            if on_thread_done is not None:
                on_thread_done(thread_id)
    return report


def _damaged(source: _Source, config: RunnableConfig, report: ImportReport, reason: str) -> StorageError:
    where = config["configurable"]
    ns = f", namespace {where['checkpoint_ns']!r}" if where["checkpoint_ns"] else ""
    return StorageError(
        f"checkpoint {where['checkpoint_id']} of thread {where['thread_id']!r}{ns} in {source.shown} cannot "
        f"be read ({reason[:200]}): the row is damaged. {report.checkpoints} checkpoint(s) before it were "
        "imported. Restore the stock database from a backup, or delete that row (and the thread's later rows, "
        "which build on it) from its checkpoints table, then run `remem import` again: it continues where it "
        "stopped"
    )


def _read(source: _Source, config: RunnableConfig, report: ImportReport) -> Any:
    """The stock checkpoint at ``config``; a row the stock saver cannot decode, or that decodes to something
    that is not a checkpoint, is a StorageError naming it."""
    try:
        tup = source.saver.get_tuple(config)
    except RememError:
        raise
    except Exception as exc:  # the stock saver's own decoding fails, whatever its error
        raise _damaged(source, config, report, f"{type(exc).__name__}: {exc}") from exc
    if tup is None:
        return None
    checkpoint = tup.checkpoint
    if not (
        isinstance(checkpoint, dict)
        and isinstance(checkpoint.get("channel_values", {}), dict)
        and isinstance(checkpoint.get("channel_versions", {}), dict)
        and isinstance(tup.metadata, dict)
    ):
        raise _damaged(
            source, config, report, f"it decodes to a {type(checkpoint).__name__}, not a checkpoint"
        )
    return tup


def _finish_writes(
    source: _Source,
    target: BaseCheckpointSaver[Any],
    tup: Any,
    config: RunnableConfig,
    report: ImportReport,
) -> None:
    have = target.get_tuple(config)
    present: dict[str, int] = {}
    for task_id, _, _ in (have.pending_writes if have is not None else None) or []:
        present[task_id] = present.get(task_id, 0) + 1
    missing: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or []:
        missing.setdefault(task_id, []).append((channel, value))
    missing = {task: writes for task, writes in missing.items() if present.get(task, 0) < len(writes)}
    if not missing:
        report.skipped += 1
        return
    ns, checkpoint_id = config["configurable"]["checkpoint_ns"], config["configurable"]["checkpoint_id"]
    paths = source.task_paths(config["configurable"]["thread_id"], ns, checkpoint_id)
    for task_id, writes in missing.items():
        target.put_writes(config, writes, task_id, paths.get(task_id, ""))
        report.writes += len(writes)


def _import_thread(
    source: _Source,
    target: BaseCheckpointSaver[Any],
    thread_id: str,
    report: ImportReport,
    on_checkpoint: Callable[[ImportReport], None] | None,
) -> None:
    done: dict[str, str] = {}  # per namespace: the newest checkpoint already in the target
    for ns, checkpoint_id in source.checkpoint_ids(thread_id):
        if ns not in done:
            have = target.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
            done[ns] = have.config["configurable"]["checkpoint_id"] if have is not None else ""
        if checkpoint_id < done[ns]:
            report.skipped += 1
            continue
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        }
        tup = _read(source, config, report)
        if tup is None:  # deleted meanwhile
            continue
        if checkpoint_id == done[ns]:
            # The newest checkpoint already there: an earlier run may have stopped between it and its writes.
            # Only the missing writes are added; the checkpoint is not written again (a run that finds
            # everything there changes nothing, "last written" included).
            _finish_writes(source, target, tup, config, report)
            continue
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        where: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
        if parent:
            where["checkpoint_id"] = parent
        stored = target.put({"configurable": where}, tup.checkpoint, tup.metadata, {})
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in tup.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        paths = source.task_paths(thread_id, ns, checkpoint_id) if by_task else {}
        for task_id, writes in by_task.items():
            target.put_writes(stored, writes, task_id, paths.get(task_id, ""))
            report.writes += len(writes)
        report.checkpoints += 1
        if on_checkpoint is not None:
            on_checkpoint(report)
