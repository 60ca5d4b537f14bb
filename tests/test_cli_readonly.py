"""Reads never write: every reading command, on a database that holds nothing of remem's, creates nothing.

tests/test_cli_hostile.py covers a missing path, a corrupt file and a read-only file. Here the file or the
database exists but holds no remem schema: an empty file, a SQLite file of another program, an empty
PostgreSQL database. Each reading command (found from the click group, so a new one is run here too)
leaves every byte and every table as it was, and either reports an empty result or says in one line
what is missing and what to do.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import psycopg
import pytest

from tests.cli_commands import WRITING, all_commands, run

READS = [path for path in all_commands() if path not in WRITING]
# What a reading command may say about a database without remem's tables: the database named, and either
# an empty result or what is missing with a next step (an option to check, or a command to run).
EMPTY_RESULTS = ("no threads yet in", "no usage recorded in", "no job queued yet in")
NEXT_STEPS = ("check --db", "`remem threads", "--user", "--thread")


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("REMEM_") or name == "OPENAI_API_KEY":
            monkeypatch.delenv(name)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _assert_says_what_is_missing(path: tuple[str, ...], shown: str, output: str, exit_code: int) -> None:
    assert "Traceback" not in output, (path, output)
    if path == ("config",):
        assert exit_code == 0, output
        return
    assert shown in output, (path, output)
    if exit_code == 0:
        assert any(said in output for said in EMPTY_RESULTS), (path, output)
    else:
        assert exit_code == 1, (path, output)
        assert any(step in output for step in NEXT_STEPS), (path, output)


def test_the_reading_commands_are_the_expected_ones() -> None:
    # The list is found from the click group; this pins that it found the inspection commands.
    names = {" ".join(p) for p in READS}
    assert {
        "state",
        "history",
        "threads",
        "checkpoints stats",
        "store stats",
        "usage",
        "export",
        "config",
    } <= names


@pytest.mark.parametrize("kind", ["empty file", "another program's file"])
def test_a_sqlite_file_without_remem_tables_is_read_and_left_as_it_was(kind: str, tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    path = folder / "app.db"
    if kind == "empty file":
        path.write_bytes(b"")
    else:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        conn.execute("INSERT INTO orders (item) VALUES ('tea')")
        conn.commit()
        conn.close()
    before = _files(folder)
    url = f"sqlite:///{path}"
    for command in READS:
        result = run(command, url)
        _assert_says_what_is_missing(command, url, result.output, result.exit_code)
        assert _files(folder) == before, command  # no table, no -wal or -shm file, not a byte changed


def _tables(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.postgres
def test_an_empty_postgres_database_gets_no_table_from_a_read(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    before = _tables(pg_url)
    for command in READS:
        result = run(command, pg_url)
        _assert_says_what_is_missing(command, "postgresql://", result.output, result.exit_code)
        assert _tables(pg_url) == before, command


@pytest.mark.postgres
def test_a_libpq_key_value_dsn_opens_the_store_like_a_url(pg_url: str) -> None:
    """One parser: a key=value DSN names PostgreSQL for every command, the store's included."""
    from psycopg.conninfo import conninfo_to_dict

    from remem.store import open_store

    with open_store(pg_url) as store:
        store.put(("docs",), "k", {"text": "tea"})
    dsn = " ".join(f"{k}={v}" for k, v in conninfo_to_dict(pg_url).items())
    result = run(("store", "stats"), dsn)
    assert result.exit_code == 0, result.output
    assert "items" in result.output


def test_a_database_on_a_read_only_file_system_is_read_and_writes_say_why_not(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from click.testing import CliRunner

    from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
    from remem.cli import main

    source = tmp_path / "app.db"
    with checkpointer_from_url(source) as saver:
        run_turn(
            build_agent(ScriptedChatModel(default="ok"), strategy="filter", checkpointer=saver), "t", "hi"
        )
    media = tmp_path / "media"
    media.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(media)], check=False).returncode:
        pytest.skip("mounting a file system needs root (CI runs as root)")
    try:
        shutil.copyfile(source, media / "app.db")
        subprocess.run(["mount", "-o", "remount,ro", str(media)], check=True)
        url = f"sqlite:///{media / 'app.db'}"
        shown = CliRunner().invoke(main, ["threads", "--db", url])
        assert shown.exit_code == 0 and "│ t " in shown.output, shown.output
        refused = CliRunner().invoke(main, ["forget", "--thread", "t", "--yes", "--db", url])
        assert refused.exit_code == 1 and "read-only file system" in refused.output, refused.output
        assert "backup" not in shown.output + refused.output
    finally:
        subprocess.run(["umount", str(media)], check=False)
