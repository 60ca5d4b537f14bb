"""Opening savers: every ``from_conn_string`` takes what the stock one takes, through the one URL parser;
new files are owner-only; no password reaches an error or a repr."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from remem.checkpoint import (
    AsyncPostgresSaver,
    AsyncSqliteSaver,
    PostgresSaver,
    SqliteSaver,
    acheckpointer_from_url,
    checkpointer_from_url,
)
from remem.errors import ConfigError, RememError, StorageError

SECRET = "s3cr3t-Pa55"
CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _roundtrip(saver: Any) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    saver.put(CONFIG, empty_checkpoint(), {"step": 1}, {})
    assert saver.get_tuple(CONFIG) is not None


async def _aroundtrip(saver: Any) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    await saver.aput(CONFIG, empty_checkpoint(), {"step": 1}, {})
    assert await saver.aget_tuple(CONFIG) is not None


def _sqlite_forms(tmp_path: Path) -> list[Any]:
    return [
        str(tmp_path / "plain.db"),
        tmp_path / "path.db",
        ":memory:",
        f"sqlite:///{tmp_path / 'url.db'}",
    ]


def test_sqlite_saver_takes_what_the_stock_one_takes(tmp_path: Path) -> None:
    for form in _sqlite_forms(tmp_path):
        with SqliteSaver.from_conn_string(form) as saver:
            _roundtrip(saver)
    assert {p.name for p in tmp_path.iterdir() if p.suffix == ".db"} == {"plain.db", "path.db", "url.db"}


async def test_async_sqlite_saver_takes_what_the_stock_one_takes(tmp_path: Path) -> None:
    for form in _sqlite_forms(tmp_path):
        async with AsyncSqliteSaver.from_conn_string(form) as saver:
            await _aroundtrip(saver)
    assert {p.name for p in tmp_path.iterdir() if p.suffix == ".db"} == {"plain.db", "path.db", "url.db"}


def _postgres_forms(pg_url: str) -> list[str]:
    info = conninfo_to_dict(pg_url)
    return [pg_url, pg_url.replace("postgresql://", "postgres://", 1), make_conninfo(**info)]


@pytest.mark.postgres
def test_postgres_saver_takes_urls_and_dsns(pg_url: str) -> None:
    for form in _postgres_forms(pg_url):
        with PostgresSaver.from_conn_string(form) as saver:
            _roundtrip(saver)
    with PostgresSaver.from_conn_string(pg_url, pipeline=True) as piped:  # stock's one-connection pipeline
        assert piped.pipe is not None
        _roundtrip(piped)


@pytest.mark.postgres
async def test_async_postgres_saver_takes_urls_and_dsns(pg_url: str) -> None:
    for form in _postgres_forms(pg_url):
        async with AsyncPostgresSaver.from_conn_string(form) as saver:
            await _aroundtrip(saver)
    async with AsyncPostgresSaver.from_conn_string(pg_url, pipeline=True) as piped:
        assert piped.pipe is not None
        await _aroundtrip(piped)


def test_a_url_of_the_other_backend_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PostgresSaver"), SqliteSaver.from_conn_string("postgresql://h/db"):
        pass
    with pytest.raises(ConfigError, match="SqliteSaver"), PostgresSaver.from_conn_string(str(tmp_path / "x")):
        pass


def test_new_sqlite_files_and_folders_are_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "new" / "deeper" / "cp.db"
    with checkpointer_from_url(f"sqlite:///{db}") as saver:
        _roundtrip(saver)
    for path, mode in ((db, 0o600), (db.parent, 0o700), (db.parent.parent, 0o700)):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    for side in db.parent.glob("cp.db-*"):  # WAL and shared memory take the database file's mode
        assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, side


# Every way the checkpoint package can fail on a URL with a password in it.
_UNREACHABLE = [
    f"postgresql://someone:{SECRET}@127.0.0.1:1/nowhere",
    f"postgresql://someone@127.0.0.1:1/nowhere?password={SECRET}",
    f"host=127.0.0.1 port=1 user=someone password={SECRET} dbname=nowhere",
    f"host=127.0.0.1 port=1 password='{SECRET}' dbname=nowhere",
]
_MALFORMED = [
    f"host=127.0.0.1 password={SECRET} dbname",  # libpq echoes the DSN around a parse error
    f"postgresql://someone:{SECRET}@127.0.0.1:notaport/db",
]


def _openers(url: str) -> Iterator[AbstractContextManager[Any]]:
    yield PostgresSaver.from_conn_string(url)
    yield PostgresSaver.from_conn_string(url, pipeline=True)
    yield PostgresSaver.from_conn_string(url, read_only=True)
    yield checkpointer_from_url(url)
    yield checkpointer_from_url(url, create=False)


def _aopeners(url: str) -> Iterator[AbstractAsyncContextManager[Any]]:
    yield AsyncPostgresSaver.from_conn_string(url)
    yield AsyncPostgresSaver.from_conn_string(url, pipeline=True)
    yield acheckpointer_from_url(url)


def _assert_hidden(exc: BaseException) -> None:
    shown = [str(exc), repr(exc)]
    cause = exc.__cause__ or exc.__context__
    while cause is not None and not exc.__suppress_context__:
        shown += [str(cause), repr(cause)]
        cause = cause.__cause__ or cause.__context__
    assert all(SECRET not in text for text in shown), shown


@pytest.mark.parametrize("url", _UNREACHABLE + _MALFORMED)
def test_no_error_shows_the_password(url: str) -> None:
    for opener in _openers(url):
        with pytest.raises(RememError) as info, opener:
            pass
        _assert_hidden(info.value)
        if url in _UNREACHABLE:
            assert isinstance(info.value, StorageError)
            assert "127.0.0.1:1/nowhere" in str(info.value)
            assert "check that the server is running" in str(info.value)


@pytest.mark.parametrize("url", _UNREACHABLE[:1] + _MALFORMED[:1])
async def test_no_async_error_shows_the_password(url: str) -> None:
    for opener in _aopeners(url):
        with pytest.raises(RememError) as info:
            async with opener:
                pass
        _assert_hidden(info.value)


@pytest.mark.postgres
def test_an_error_of_a_working_saver_shows_no_password(pg_url: str) -> None:
    info = conninfo_to_dict(pg_url)
    url = make_conninfo(**info, password=SECRET)  # the machine's server trusts, so any password works
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        assert SECRET not in repr(saver)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("DROP TABLE remem_cp_checkpoints CASCADE")
        with pytest.raises(StorageError) as failure:
            _roundtrip(saver)
        _assert_hidden(failure.value)
        assert "remem_cp_checkpoints" in str(failure.value)


@pytest.mark.parametrize("dsn", ["user=postgres port=5432", "service=nowhere", "dbname=x"])
def test_any_libpq_dsn_names_postgres(dsn: str) -> None:
    from remem._url import parse_database_url

    assert parse_database_url(dsn).kind == "postgres"
    assert parse_database_url("a=b.db").kind == "sqlite"  # a file name with "=" in it stays a file
