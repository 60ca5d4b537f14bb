"""One SQLite file, many parts, many processes: stores and a checkpointer share it without errors.

Real processes (forked before any connection is opened, so they share nothing but the file) work on one file at
once. Every store transaction that may write starts as a writer, so a busy file waits for the busy timeout
instead of failing at once; every acknowledged put must be readable afterwards.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import traceback
from pathlib import Path
from typing import Any

import pytest

from remem.errors import StorageError
from remem.store import SqliteStore
from remem.testing import FakeEmbedder

_CTX = multiprocessing.get_context("fork")
DIMS = 16


def _store_worker(path: str, worker: int, rounds: int, start: Any, out: Any) -> None:
    """Puts, gets (refreshing TTLs: reads that write) and hybrid searches on the shared file."""
    acknowledged: list[str] = []
    errors: list[str] = []
    index = {"dims": DIMS, "embed": FakeEmbedder(DIMS, seed=3), "fields": ["text"]}
    try:
        start.wait()
        with SqliteStore.from_conn_string(path, index=index, ttl={"default_ttl": 60}) as store:
            ns = ("users", f"u{worker}", "memories")
            for i in range(rounds):
                try:
                    store.put(ns, f"k{i}", {"text": f"worker {worker} note {i} about tea and rivers"})
                    acknowledged.append(f"k{i}")
                    store.get(ns, f"k{max(i - 1, 0)}")
                    store.search(("users",), query=f"note {i} tea", limit=5)
                except Exception:
                    errors.append(traceback.format_exc(limit=3))
    except Exception:
        errors.append(traceback.format_exc(limit=3))
    out.put(("store", worker, acknowledged, errors))


def _saver_worker(path: str, worker: int, rounds: int, start: Any, out: Any) -> None:
    """A remem SqliteSaver writing checkpoints and pending writes on the same file."""
    from langgraph.checkpoint.base import empty_checkpoint

    from remem.checkpoint import SqliteSaver

    acknowledged: list[str] = []
    errors: list[str] = []
    try:
        start.wait()
        with SqliteSaver.from_conn_string(path) as saver:
            saver.setup()
            config: Any = {"configurable": {"thread_id": f"t{worker}", "checkpoint_ns": ""}}
            for i in range(rounds):
                try:
                    checkpoint = empty_checkpoint()
                    checkpoint["channel_values"] = {"turn": i}
                    checkpoint["channel_versions"] = {"turn": i + 1}
                    config = saver.put(config, checkpoint, {"step": i}, {"turn": i + 1})
                    saver.put_writes(config, [("turn", i)], task_id=f"task{i}")
                    acknowledged.append(config["configurable"]["checkpoint_id"])
                except Exception:
                    errors.append(traceback.format_exc(limit=3))
    except Exception:
        errors.append(traceback.format_exc(limit=3))
    out.put(("saver", worker, acknowledged, errors))


def _run(targets: list[tuple[Any, tuple[Any, ...]]], timeout: float = 180) -> list[tuple[Any, ...]]:
    start = _CTX.Barrier(len(targets))
    out = _CTX.Queue()
    procs = [_CTX.Process(target=fn, args=(*args, start, out)) for fn, args in targets]
    for p in procs:
        p.start()
    results = [out.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0, f"a worker process died with exit code {p.exitcode}"
    return results


def test_stores_and_a_saver_share_one_file_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    rounds = 40
    results = _run(
        [(_store_worker, (path, w, rounds)) for w in range(3)]
        + [(_saver_worker, (path, w, rounds)) for w in range(2)]
    )
    errors = [e for *_, errs in results for e in errs]
    assert errors == [], "\n".join(errors[:3])
    from remem.checkpoint import SqliteSaver

    with SqliteStore.from_conn_string(path) as store, SqliteSaver.from_conn_string(path) as saver:
        for kind, worker, acknowledged, _ in results:
            if kind == "store":
                ns = ("users", f"u{worker}", "memories")
                assert len(acknowledged) == rounds
                assert all(store.get(ns, key) is not None for key in acknowledged)
            else:
                config: Any = {"configurable": {"thread_id": f"t{worker}", "checkpoint_ns": ""}}
                stored = [c.config["configurable"]["checkpoint_id"] for c in saver.list(config)]
                assert sorted(stored) == sorted(acknowledged) and len(stored) == rounds


def _setup_worker(path: str, worker: int, start: Any, out: Any) -> None:
    errors: list[str] = []
    try:
        start.wait()
        index = {"dims": DIMS, "embed": FakeEmbedder(DIMS, seed=3)}
        with SqliteStore.from_conn_string(path, index=index) as store:
            store.put(("setup",), f"w{worker}", {"text": "opened"})
    except Exception:
        errors.append(traceback.format_exc(limit=3))
    out.put(("setup", worker, [f"w{worker}"], errors))


def test_eight_processes_set_up_a_fresh_file_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh" / "new.db")
    results = _run([(_setup_worker, (path, w)) for w in range(8)])
    errors = [e for *_, errs in results for e in errs]
    assert errors == [], "\n".join(errors[:3])
    assert (Path(path).stat().st_mode & 0o777) == 0o600  # created owner-only
    with SqliteStore.from_conn_string(path) as store:
        assert sorted(i.key for i in store.search(("setup",), limit=20)) == [f"w{w}" for w in range(8)]


def test_a_busy_file_waits_then_says_what_holds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write lock held past the busy timeout fails with a message naming the file and the cause."""
    from remem import _sqlite

    path = tmp_path / "busy.db"
    monkeypatch.setattr(_sqlite, "BUSY_TIMEOUT_MS", 200)  # every part of a shared file waits this long
    with SqliteStore.from_conn_string(path) as store:
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageError) as caught:
                store.put(("a",), "k", {"text": "x"})
            # a read that does not write is not blocked by a writer (WAL)
            assert store.get(("a",), "k") is None
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        message = str(caught.value)
        assert "busy" in message and "busy.db" in message and "another process" in message
        assert "permission" not in message
        store.put(("a",), "k", {"text": "x"})  # free again: the put goes through
        assert store.get(("a",), "k") is not None


def test_store_urls_go_through_the_one_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remem.errors import ConfigError
    from remem.store import open_store

    monkeypatch.chdir(tmp_path)
    for url in ("memory://", ":memory:"):
        with open_store(url) as store:
            store.put(("a",), "k", {"text": "kept in memory"})
            assert store.get(("a",), "k") is not None
    assert list(tmp_path.iterdir()) == []  # no file named after the URL
    with open_store("sqlite:///sub/dir/x.db") as store:
        store.put(("a",), "k", {"text": "on file"})
    assert (tmp_path / "sub" / "dir" / "x.db").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "sub").stat().st_mode & 0o777 == 0o700
    with pytest.raises(ConfigError, match="PostgreSQL URL") as caught:
        SqliteStore.from_conn_string("postgresql://someone:secret@db.invalid/x").__enter__()
    assert "secret" not in str(caught.value)
    with pytest.raises(ConfigError, match="unsupported database URL"):
        open_store("mysql://db/x").__enter__()


class _LockProbe(FakeEmbedder):
    """An embedder that checks, each time the model runs, whether the file's write lock is free."""

    def __init__(self, path: Path) -> None:
        super().__init__(DIMS, seed=3)
        self.path = path
        self.lock_free: list[bool] = []

    def embed_array(self, texts: list[str]) -> Any:
        probe = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            self.lock_free.append(True)
        except sqlite3.OperationalError:
            self.lock_free.append(False)
        finally:
            probe.close()
        return super().embed_array(texts)


def test_the_model_runs_before_the_write_transaction_opens(tmp_path: Path) -> None:
    """Embedding is the slow part of a put: it must not hold the write lock every other process waits on."""
    from langgraph.store.base import PutOp, SearchOp

    path = tmp_path / "embed.db"
    probe = _LockProbe(path)
    with SqliteStore.from_conn_string(
        path, index={"dims": DIMS, "embed": probe, "fields": ["text"]}
    ) as store:
        store.put(("a",), "k", {"text": "first text"})
        store.put(("a",), "k", {"text": "first text"})  # unchanged: no model call at all
        assert len(probe.lock_free) == 1
        store.batch([PutOp(("a",), "j", {"text": "second"}), SearchOp(("a",), query="second text")])
        store.search(("a",), query="a query")
        assert len(probe.lock_free) == 3 and all(probe.lock_free)
