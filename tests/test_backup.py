"""RUNBOOK.md's backup and restore steps: `remem backup` of a SQLite file another process keeps writing,
restored by moving the copy in place; PostgreSQL through pg_dump and pg_restore."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from remem import Memory, Settings
from remem.cli import main

WRITER = """
import sys
from remem import Memory, Settings
url, log = sys.argv[1], sys.argv[2]
with Memory.from_url(url, settings=Settings(embedder="fake")) as memory, open(log, "a", buffering=1) as out:
    thread = memory.thread("busy", user_id="u")
    n = 0
    while True:
        thread.add_messages([{"role": "user", "content": f"note {n}", "id": f"m{n}"}])
        out.write(f"m{n}\\n")  # acknowledged
        n += 1
"""


def _acknowledged(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line] if log.exists() else []


def test_a_backup_taken_while_a_process_writes_holds_what_was_acknowledged_and_restores(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    url = f"sqlite:///{db}"
    with Memory.from_url(url, settings=Settings(embedder="fake")) as memory:
        memory.thread("busy", user_id="u")
    log = tmp_path / "acks.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, url, str(log)], env=env)
    try:
        deadline = time.monotonic() + 60
        while len(_acknowledged(log)) < 5:
            assert writer.poll() is None and time.monotonic() < deadline, "the writer did not start writing"
            time.sleep(0.05)
        before = _acknowledged(log)
        result = CliRunner().invoke(main, ["backup", "--db", url, "--to", str(tmp_path / "copy.db")])
        after = _acknowledged(log)
    finally:
        writer.kill()
        writer.wait()
    assert result.exit_code == 0, result.output
    copy = tmp_path / "copy.db"
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # Restore (RUNBOOK.md): the writers are stopped; the copy takes the database's place.
    restored = tmp_path / "restored" / "app.db"
    restored.parent.mkdir()
    shutil.copyfile(copy, restored)
    with Memory.from_url(f"sqlite:///{restored}", settings=Settings(embedder="fake")) as memory:
        ids = [m.id for m in memory.get_thread("busy").messages()]
    assert set(before) <= set(ids) <= set(after) | {f"m{len(after)}"}  # at most one in flight
    assert ids == [f"m{n}" for n in range(len(ids))]  # in order, none missing
    again = CliRunner().invoke(main, ["backup", "--db", url, "--to", str(copy)])
    assert again.exit_code == 2 and "never overwrites" in again.output


@pytest.mark.postgres
def test_postgres_is_backed_up_with_pg_dump_and_restored_with_pg_restore(pg_url: str, tmp_path: Path) -> None:
    from tests.conftest import POSTGRES_URL, _fresh_database

    with Memory.from_url(pg_url, settings=Settings(embedder="fake")) as memory:
        memory.thread("t1", user_id="u").add_messages([{"role": "user", "content": "kept", "id": "k1"}])
    refused = CliRunner().invoke(main, ["backup", "--db", pg_url, "--to", str(tmp_path / "x.db")])
    assert refused.exit_code == 2 and "pg_dump -Fc" in refused.output
    dump = tmp_path / "remem.dump"
    subprocess.run(["pg_dump", "-Fc", "-f", str(dump), pg_url], check=True)
    for target in _fresh_database(POSTGRES_URL):
        subprocess.run(["pg_restore", "--no-owner", "-d", target, str(dump)], check=True)
        with Memory.from_url(target, settings=Settings(embedder="fake")) as memory:
            assert [m.content for m in memory.get_thread("t1").messages()] == ["kept"]
