"""Files remem creates are its owner's alone: folders 0700, database files 0600.

SQLite creates its ``-wal`` and ``-shm`` files with the permissions of the database file, so creating the
database file owner-only first is enough for all three.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["make_private_dir", "make_private_file"]


def make_private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents as owner-only folders (existing folders are left as they are)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)


def make_private_file(path: Path) -> None:
    """Create ``path`` empty and owner-only if it does not exist yet (its folder too); never truncate."""
    if str(path) in ("", ":memory:") or path.exists():
        return
    make_private_dir(path.parent)
    with contextlib.suppress(FileExistsError):  # another process created it first
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
