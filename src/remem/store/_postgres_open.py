"""Opening what a Postgres store runs on: a connection or a pool (LangGraph's ``PoolConfig``), sync or async,
with the session options every store connection gets (read-only sessions included)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from remem import _pgpool
from remem._secrets import mask_secrets
from remem._url import display_url, parse_database_url
from remem.errors import ConfigError, StorageError

__all__ = ["AsyncConn", "aconnect", "aopened", "connect", "opened"]


def _dsn(conn_string: str) -> str:
    parsed = parse_database_url(conn_string)
    if parsed.kind != "postgres":
        raise ConfigError(
            f"{display_url(conn_string)} is not a PostgreSQL URL; open it with SqliteStore (or open_store)"
        )
    return parsed.target


_READ_ONLY = "-c default_transaction_read_only=on"  # the server refuses every write of the session


def _unreachable(exc: BaseException) -> StorageError:
    return StorageError(
        f"cannot connect to PostgreSQL: {mask_secrets(str(exc))}; check the URL and that the server is up"
    )


def _session_options(read_only: bool) -> dict[str, Any]:
    """What every connection of a store is opened with (directly or by a pool)."""
    options: dict[str, Any] = {"autocommit": True, "connect_timeout": 10}
    if read_only:
        options["options"] = _READ_ONLY
    return options


def _pool_options(pool_config: Mapping[str, Any], read_only: bool) -> dict[str, Any]:
    """A pool's size and connection options as LangGraph's ``PoolConfig`` describes them (a read-only
    session stays read-only whatever the caller's ``kwargs`` say)."""
    kwargs = {**_session_options(False), **dict(pool_config.get("kwargs") or {})}
    if read_only:
        kwargs["options"] = _READ_ONLY
    return {
        "min_size": int(pool_config.get("min_size", 1)),
        "max_size": pool_config.get("max_size"),
        "kwargs": kwargs,
    }


def connect(dsn: str, read_only: bool = False) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(dsn, **_session_options(read_only))
    except psycopg.Error as exc:
        raise _unreachable(exc) from exc


def _pool(dsn: str, pool_config: Mapping[str, Any], read_only: bool = False) -> ConnectionPool[Any]:
    """A pool as LangGraph's ``PoolConfig`` describes it (``min_size``, ``max_size``, ``kwargs``). A connection
    a restarted server broke is dropped as it is handed out, without a round trip (:func:`remem._pgpool.check`);
    a call that still finds one broken runs again once after the pool dropped every broken one
    (``PostgresStore``'s retry calls ``pool.check()``), so a restart fails no call."""
    try:
        pool: ConnectionPool[Any] = ConnectionPool(
            dsn, **_pool_options(pool_config, read_only), check=_pgpool.check, open=True
        )
        pool.wait(timeout=10)
    except Exception as exc:
        raise _unreachable(exc) from exc
    return pool


@contextlib.contextmanager
def opened(
    conn_string: str, pipeline: bool, pool_config: Mapping[str, Any] | None, read_only: bool = False
) -> Iterator[tuple[psycopg.Connection[Any] | ConnectionPool[Any], psycopg.Pipeline | None, str]]:
    dsn = _dsn(conn_string)
    if pool_config is not None:
        if pipeline:
            raise ConfigError("pipeline=True works on a single connection; drop pool_config= or pipeline=")
        pool = _pool(dsn, pool_config, read_only)
        try:
            yield pool, None, dsn
        finally:
            pool.close()
        return
    conn = connect(dsn, read_only)
    try:
        if pipeline:
            with conn.pipeline() as pipe:
                yield conn, pipe, dsn
        else:
            yield conn, None, dsn
    finally:
        conn.close()


AsyncConn = psycopg.AsyncConnection[Any]


async def aconnect(dsn: str, read_only: bool = False) -> AsyncConn:
    """Async version of :func:`connect`."""
    try:
        return await psycopg.AsyncConnection.connect(dsn, **_session_options(read_only))
    except psycopg.Error as exc:
        raise _unreachable(exc) from exc


async def _apool(
    dsn: str, pool_config: Mapping[str, Any], read_only: bool = False
) -> AsyncConnectionPool[Any]:
    """Async version of :func:`_pool`."""
    try:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            **_pool_options(pool_config, read_only),
            check=_pgpool.acheck,
            open=False,
        )
        await pool.open(wait=True, timeout=10)
    except Exception as exc:
        raise _unreachable(exc) from exc
    return pool


@contextlib.asynccontextmanager
async def aopened(
    conn_string: str, pipeline: bool, pool_config: Mapping[str, Any] | None, read_only: bool = False
) -> AsyncIterator[tuple[AsyncConn | AsyncConnectionPool[Any], psycopg.AsyncPipeline | None, str]]:
    """Async version of :func:`opened`."""
    dsn = _dsn(conn_string)
    if pool_config is not None:
        if pipeline:
            raise ConfigError("pipeline=True works on a single connection; drop pool_config= or pipeline=")
        pool = await _apool(dsn, pool_config, read_only)
        try:
            yield pool, None, dsn
        finally:
            await pool.close()
        return
    conn = await aconnect(dsn, read_only)
    try:
        if pipeline:
            async with conn.pipeline() as pipe:
                yield conn, pipe, dsn
        else:
            yield conn, None, dsn
    finally:
        await conn.close()
