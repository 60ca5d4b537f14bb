"""What every request passes before an endpoint: a size cap, a key, a rate limit; and the metrics.

- **Size** (:class:`BodyLimit`, outermost): a body over ``max_body`` bytes answers 413 before any of it
  is parsed, whether the client announced its length or streams it.
- **Key** (:func:`authenticate`): ``X-Api-Key: rmk_...`` (what ``langgraph-sdk`` sends) or
  ``Authorization: Bearer rmk_...``. Without a valid key: 401, and the body never names the key. A server
  whose database has no keys (allowed on loopback only) serves everyone as the database's owner.
- **Rate** (:class:`RateLimiter`): a token bucket per key, ``rate`` requests per minute with a burst of
  as many; past it, 429 with ``Retry-After`` in whole seconds. On PostgreSQL the bucket is a row of the
  database (:class:`~remem.server._shared_limit.SharedRateLimiter`), so every worker draws from it; a
  server on SQLite is one process and counts in it.
- **Metrics** (:class:`Metrics`): requests, latency histograms and errors by method and route template
  (``/v1/threads/{thread_id}``, never a thread id or a key), requests in flight.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "BodyLimit",
    "Message",
    "Metrics",
    "RateLimiter",
    "Receive",
    "Scope",
    "Send",
    "api_key_of",
    "route_path",
    "send_json",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse a request body over ``max_body`` bytes with 413 (read at most ``max_body + 1`` of it)."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    def _too_large(self) -> bytes:
        return (
            b'{"detail":"the request body is over '
            + str(self.max_body).encode()
            + b' bytes; send less at once (or start the server with a larger --max-body)",'
            b'"error":"PayloadTooLarge"}'
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    announced = 0
                if announced > self.max_body:
                    await send_json(send, 413, self._too_large(), [])
                    return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await send_json(send, 413, self._too_large(), [])
                return
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def route_path(scope: Scope) -> str:
    """The path the app's routes match: without the app's root path (Starlette's ``get_route_path``). The
    guard decides by this path too, so a rule on ``/v1/keys`` holds under any root path."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    if path == root:
        return ""
    return path[len(root) :] if path[len(root)] == "/" else path


def api_key_of(headers: Any) -> str | None:
    """The key a request carries, or None."""
    key = headers.get("x-api-key")
    if key:
        return str(key).strip()
    auth = headers.get("authorization") or ""
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


class RateLimiter:
    """A token bucket per key: ``per_minute`` requests a minute, bursts of as many (0: no limit)."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = max(1.0, float(per_minute))
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait_for(self, key_id: str) -> float:
        """0 when the request may go now (and count it); else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.get(key_id, (self.burst, now))
            tokens = min(self.burst, tokens + (now - then) * self.rate)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key_id] = (tokens, now)
            return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait: float) -> str:
        return str(max(1, math.ceil(wait)))


class Metrics:
    """Prometheus metrics of one server process, in a registry of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "remem_http_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "remem_http_request_seconds",
            "time to answer a request",
            ["method", "route"],
            registry=self.registry,
        )
        self.errors = Counter(
            "remem_http_errors",
            "requests answered with an error, by the error's class",
            ["route", "error"],
            registry=self.registry,
        )
        self.in_flight = Gauge("remem_http_in_flight", "requests being answered", registry=self.registry)
        self.refused = Counter(
            "remem_http_refused",
            "requests refused before an endpoint (unauthorized, rate limited, too large)",
            ["reason"],
            registry=self.registry,
        )

    def watch(self, pools: Callable[[], dict[str, Any]]) -> None:
        """At each scrape, also report the connection pools ``pools()`` names and this process's lease
        waits (:func:`remem._lease.lease_waits`)."""
        self.registry.register(_Gathered(pools))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Gathered:
    """Pool use and lease waits, read when /metrics is scraped (a prometheus_client custom collector)."""

    def __init__(self, pools: Callable[[], dict[str, Any]]) -> None:
        self.pools = pools

    def describe(self) -> list[Any]:
        return []  # so that registering it does not collect

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from remem._lease import lease_waits

        connections = GaugeMetricFamily(
            "remem_db_pool_connections",
            "connections of a database pool: size, in_use, available, max; and requests waiting for one",
            labels=["pool", "state"],
        )
        for name, pool in self.pools().items():
            stats = pool.get_stats()
            size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
            connections.add_metric([name, "size"], size)
            connections.add_metric([name, "in_use"], max(size - available, 0))
            connections.add_metric([name, "available"], available)
            connections.add_metric([name, "max"], getattr(pool, "max_size", size))
            connections.add_metric([name, "waiting"], stats.get("requests_waiting", 0))
        yield connections
        waits = lease_waits()
        yield CounterMetricFamily(
            "remem_lease_acquired", "thread leases this process took", value=waits["acquired"]
        )
        yield CounterMetricFamily(
            "remem_lease_busy", "lease waits that ended in ThreadBusyError (409)", value=waits["busy"]
        )
        yield CounterMetricFamily(
            "remem_lease_wait_seconds",
            "seconds this process's writers waited for thread leases (taken or not)",
            value=waits["wait_seconds"],
        )
