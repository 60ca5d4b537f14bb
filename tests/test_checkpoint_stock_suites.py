"""Cases of LangGraph's own saver suites (langgraph-checkpoint-sqlite's ``test_delta_parent_walk`` and
``test_writes_task_path_migration``) that remem's savers failed, on each saver remem has.

- A checkpoint's channel value with no version (a checkpoint built by hand) comes back, as stock
  ``SqliteSaver`` keeps it, and seeds ``get_delta_channel_history``.
- ``get_delta_channel_history`` ends on a parent chain made a cycle by a re-put (the base class's walk
  loops forever there).
- ``setup()`` on current tables does not wait for another connection's write lock.
- A serializer set after construction (``saver.serde = EncryptedSerializer(...)``, LangGraph's
  ``sqlite_aes`` fixture) is used: before, remem kept the first one and stored the values in plain text.
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from remem.checkpoint import AsyncSqliteSaver, SqliteSaver
from tests import matrix

CONFIG: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

CELLS = [
    pytest.param(("saver", flavour, backend), id=f"{flavour}-{backend}", marks=marks)
    for flavour in matrix.FLAVOURS
    for backend, marks in (("sqlite_file", []), ("postgres", [pytest.mark.postgres]))
]


def _checkpoint(checkpoint_id: str, values: dict[str, Any]) -> Checkpoint:
    value = empty_checkpoint()
    value["id"] = checkpoint_id
    value["channel_values"] = values
    return value


@pytest.fixture(params=CELLS)
def cell(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    with matrix.open_cell(request.param, request, tmp_path) as opened:
        yield opened


def test_a_channel_value_without_a_version_comes_back_and_seeds_the_delta_history(cell: matrix.Cell) -> None:
    saver = cell.obj
    root = cell.call(saver, "put", CONFIG, _checkpoint("a-older", {"ch": "seed", "n": {"k": [1, 2]}}), {}, {})
    cell.call(saver, "put_writes", root, [("ch", "write-root")], "task")
    child = cell.call(saver, "put", root, _checkpoint("z-newer", {}), {}, {})
    assert cell.call(saver, "get_tuple", root).checkpoint["channel_values"] == {
        "ch": "seed",
        "n": {"k": [1, 2]},
    }
    got = cell.call(saver, "get_delta_channel_history", config=child, channels=["ch"])
    assert got["ch"] == {"writes": [("task", "ch", "write-root")], "seed": "seed"}


def test_the_delta_history_walk_ends_where_a_re_put_made_the_parent_chain_a_cycle(cell: matrix.Cell) -> None:
    saver = cell.obj
    a = cell.call(saver, "put", CONFIG, _checkpoint("cid-a", {}), {}, {})
    b = cell.call(saver, "put", a, _checkpoint("cid-b", {}), {}, {})
    cell.call(saver, "put", b, _checkpoint("cid-a", {}), {}, {})  # a's parent is now b
    reads = 0
    name = "aget_tuple" if cell.runner else "get_tuple"
    read = getattr(saver, name)

    def counted(config: Any) -> Any:
        nonlocal reads
        reads += 1
        assert reads < 20, "the walk goes round the cycle"
        return read(config)

    setattr(saver, name, counted)  # a bounded failure, not a hang, before the fix
    assert cell.call(saver, "get_delta_channel_history", config=b, channels=["ch"]) == {"ch": {"writes": []}}


class XorCipher:
    """A stand-in cipher (the real one needs pycryptodome): what it was given to encrypt is counted."""

    def __init__(self) -> None:
        self.encrypted = 0

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        self.encrypted += 1
        return "xor", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(b ^ 0x5A for b in ciphertext)


def test_a_serializer_set_after_construction_is_the_one_used(cell: matrix.Cell, tmp_path: Path) -> None:
    saver = cell.obj
    cipher = XorCipher()
    saver.serde = EncryptedSerializer(cipher)
    checkpoint = _checkpoint("c1", {"ch": "a secret kept encrypted"})
    checkpoint["channel_versions"] = {"ch": 1}
    stored = cell.call(saver, "put", CONFIG, checkpoint, {"source": "input"}, {"ch": 1})
    assert cipher.encrypted > 0
    assert cell.call(saver, "get_tuple", stored).checkpoint["channel_values"] == {
        "ch": "a secret kept encrypted"
    }
    if cell.backend.startswith("sqlite"):
        files = [p for p in tmp_path.iterdir() if p.name.startswith("matrix.db")]
        assert files and not any(b"a secret kept encrypted" in p.read_bytes() for p in files)


@pytest.fixture
def busy_db(tmp_path: Path) -> Any:
    """A database with current tables while another connection holds its write lock."""
    db = tmp_path / "busy.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        saver.setup()
    with closing(sqlite3.connect(db, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        yield db
        writer.execute("ROLLBACK")


def test_setup_on_current_tables_does_not_wait_for_another_writer(busy_db: Path) -> None:
    with closing(sqlite3.connect(busy_db, timeout=0)) as conn:
        saver = SqliteSaver(conn)
        saver.conn.execute("PRAGMA busy_timeout = 0")  # a wait would be an error at once, not 30 s
        saver.setup()
        assert saver.get_tuple(CONFIG) is None


def test_async_setup_on_current_tables_does_not_wait_for_another_writer(busy_db: Path) -> None:
    async def main() -> None:
        async with aiosqlite.connect(busy_db, timeout=0) as conn:
            saver = AsyncSqliteSaver(conn)
            await conn.execute("PRAGMA busy_timeout = 0")
            await saver.setup()
            assert await saver.aget_tuple(CONFIG) is None

    asyncio.run(main())
