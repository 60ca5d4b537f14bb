"""A consistent copy of a SQLite database while other processes use it (SQLite's online backup API).

    copied = backup_sqlite("app.db", "backups/app-2026-12-01.db")   # pages copied

The copy is one snapshot: every transaction committed before the backup's last step and none after, even
while writers keep writing (the backup restarts its pass when the source changes under it, as SQLite's
``sqlite3_backup_step`` does). The target is created owner-only and must not exist (never overwritten).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from remem import _sqlite
from remem._files import make_private_file
from remem.errors import ConfigError, NotFoundError, StorageError

__all__ = ["backup_sqlite"]


def backup_sqlite(source: str | Path, target: str | Path, *, pages: int = 1024) -> int:
    """Copy the SQLite database ``source`` to the new file ``target``, ``pages`` pages per step (the
    source's write lock is taken for one step at a time only); returns the number of pages copied."""
    src_path, dst_path = Path(source), Path(target)
    if not src_path.is_file():
        raise NotFoundError(f"there is no database at {src_path}; check --db")
    if dst_path.exists():
        raise ConfigError(f"{dst_path} exists; a backup never overwrites a file: give a new name")
    make_private_file(dst_path)
    try:
        src = sqlite3.connect(f"file:{src_path}?mode=rw", uri=True)
        src.execute(f"PRAGMA busy_timeout = {_sqlite.BUSY_TIMEOUT_MS}")
        dst = sqlite3.connect(dst_path)
        try:
            src.backup(dst, pages=pages)
            (count,) = dst.execute("PRAGMA page_count").fetchone()
            (check,) = dst.execute("PRAGMA quick_check").fetchone()
        finally:
            dst.close()
            src.close()
    except sqlite3.Error as exc:
        dst_path.unlink(missing_ok=True)
        raise _sqlite.storage_error(exc, where=repr(str(src_path)), doing="the backup") from exc
    if check != "ok":  # pragma: no cover - SQLite's own copy failed its check
        dst_path.unlink(missing_ok=True)
        raise StorageError(f"the backup of {src_path} failed SQLite's check ({check}); the copy was removed")
    return int(count)
