"""The per-key rate limit of a server on PostgreSQL, counted in the database so that every worker (and
every machine) serving it draws from one bucket per key.

The bucket is :class:`~remem.server._guard.RateLimiter`'s (``per_minute`` requests a minute, bursts of as
many), kept in one row per key of an UNLOGGED table (:data:`remem.layout.RATE_LIMITS_TABLE`: nothing of it
needs to outlive a crash, and it writes no WAL). One statement refills the row by the database's clock,
takes a request when there is one, and says whether it did; the row lock of ``ON CONFLICT DO UPDATE``
serialises the workers' requests of one key. It runs on an async pool, on the event loop (no thread).

A server on SQLite is one process: its in-process bucket is already the whole count.
"""

from __future__ import annotations

import logging
from typing import Any

from remem.layout import RATE_LIMITS_TABLE

__all__ = ["SharedRateLimiter"]

log = logging.getLogger("remem.server")

_CREATE = f"""
CREATE UNLOGGED TABLE IF NOT EXISTS {RATE_LIMITS_TABLE} (
    key_id TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    granted BOOLEAN NOT NULL
)"""
_REFILLED = "least(%(burst)s, b.tokens + greatest(0, EXCLUDED.at - b.at) * %(rate)s)"
_TAKE = f"""
INSERT INTO {RATE_LIMITS_TABLE} AS b (key_id, tokens, at, granted)
SELECT %(key)s, %(burst)s - 1, extract(epoch FROM clock_timestamp())::float8, true
ON CONFLICT (key_id) DO UPDATE SET
    tokens = CASE WHEN {_REFILLED} >= 1 THEN {_REFILLED} - 1 ELSE {_REFILLED} END,
    granted = {_REFILLED} >= 1,
    at = EXCLUDED.at
RETURNING granted, tokens"""
_SETUP_LOCK = 0x72656D656D524C  # "rememRL": two workers starting at once create the table once


class SharedRateLimiter:
    """A token bucket per key in PostgreSQL (see the module); ``await wait_for(key_id)`` as the guard's."""

    def __init__(self, dsn: str, per_minute: float, *, pool_size: int = 4) -> None:
        self.dsn = dsn
        self.rate = per_minute / 60.0
        self.burst = max(1.0, float(per_minute))
        self.pool_size = pool_size
        self._pool: Any = None

    async def open(self) -> None:
        if self.rate <= 0:
            return
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            self.dsn, min_size=1, max_size=self.pool_size, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True)
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_SETUP_LOCK])
            await conn.execute(_CREATE)
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def wait_for(self, key_id: str) -> float:
        """0 when the request may go now (and count it); else the seconds until it may."""
        if self.rate <= 0 or self._pool is None:
            return 0.0
        import psycopg

        params = {"key": key_id, "burst": self.burst, "rate": self.rate}
        try:
            async with self._pool.connection() as conn:
                row = await (await conn.execute(_TAKE, params)).fetchone()
        except psycopg.Error as exc:
            # The request goes on: it needs the database itself, and answers that error if it is down.
            log.warning("the rate limit could not be read from the database (%s)", type(exc).__name__)
            return 0.0
        granted, tokens = row
        return 0.0 if granted else (1.0 - float(tokens)) / self.rate
