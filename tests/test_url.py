"""One URL parser: every part that opens a database reads a URL the same way, and names the same file.

A ``sqlite:///NAME`` URL names the file NAME whatever NAME looks like; the checkpointer once parsed the
path it got back a second time, so ``sqlite:///memory`` kept a thread in memory only and
``sqlite:///host=x.db`` was refused as PostgreSQL, while the store and the ledger used the files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remem import Memory, Settings
from remem._url import parse_database_url
from remem.checkpoint import checkpointer_from_url
from remem.store import open_store
from remem.usage import open_ledger

# File names that are also other forms of URL when read as text on their own.
TRICKY_NAMES = ["memory", "memory:", "host=x.db", "dbname=app", "password=x.db", "plain.db"]


def _memory(url: str) -> AbstractContextManager[Any]:
    return Memory.from_url(url, settings=Settings(embedder="fake"))


OPENERS: dict[str, Callable[[str], AbstractContextManager[Any]]] = {
    "checkpointer": checkpointer_from_url,
    "store": open_store,
    "ledger": open_ledger,
    "memory": _memory,
}


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.mark.parametrize("opener", sorted(OPENERS))
@pytest.mark.parametrize("name", TRICKY_NAMES)
def test_every_part_opens_the_file_a_sqlite_url_names(opener: str, name: str, in_tmp: Path) -> None:
    with OPENERS[opener](f"sqlite:///{name}"):
        pass
    assert sorted(os.listdir(in_tmp)) == [name]  # that file, and no other (no -wal left, none elsewhere)


def test_a_checkpoint_written_through_a_tricky_name_is_kept_in_the_file(in_tmp: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with checkpointer_from_url("sqlite:///memory") as saver:
        saver.put(config, empty_checkpoint(), {}, {})
    with checkpointer_from_url("sqlite:///memory", create=False) as saver:
        assert saver.get_tuple(config) is not None  # in the file, not in a process's memory


_names = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=30).filter(
    lambda s: s.strip() == s and s not in (".", "..")
)


@given(_names)
def test_a_parsed_sqlite_path_parses_back_to_itself(name: str) -> None:
    """What one part parsed and hands to another (``sqlite_path``) means the same file to it."""
    parsed = parse_database_url(f"sqlite:///{name}")
    assert (parsed.kind, parsed.target) == ("sqlite", name)
    again = parse_database_url(parsed.sqlite_path)
    assert (again.kind, again.target) == ("sqlite", name)


def test_erase_finds_the_checkpoints_in_the_file_a_tricky_url_names(in_tmp: Path) -> None:
    """erase parses its URL in each part it opens (store, checkpointer, ledger): all must be the same file."""
    from langgraph.checkpoint.base import empty_checkpoint

    from remem.erasure import erase
    from remem.layout import thread_messages

    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for name in ("memory", "host=x.db"):
        url = f"sqlite:///{name}"
        with checkpointer_from_url(url) as saver:
            saver.put(config, empty_checkpoint(), {}, {})
        with open_store(url) as store:
            store.put(thread_messages("t"), "m", {"content": "hello"})
        report = erase(url, thread_id="t")
        assert (report.threads, report.checkpoints) == (1, 1), (name, report)
        with checkpointer_from_url(url, create=False) as saver:
            assert saver.get_tuple(config) is None
