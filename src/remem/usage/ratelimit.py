"""Rate limits per model (requests and tokens per minute), shared by the threads of a process, and
retries of a provider's 429 with exponential backoff and jitter.

    [remem.rate_limits."gpt-4o-mini"]
    requests_per_minute = 500
    tokens_per_minute = 200000
    [remem.rate_limits."*"]          # any other model
    requests_per_minute = 60

    limiter = shared_limiter(settings)          # one per process and configuration: threads share it
    limiter.acquire("gpt-4o-mini", tokens=812)  # waits its turn, or raises RateLimitError
    reply = call_with_retries(lambda: model.invoke(messages), model="gpt-4o-mini", limiter=limiter)

Each limit is a token bucket holding a minute's allowance that refills continuously. A call takes its
request and its counted input tokens at once, even when the bucket is short (the balance goes below zero),
and then waits until the balance is back to zero: callers are served in the order they asked, and a call
larger than a minute's allowance is not refused, it waits longer. A wait longer than ``max_wait`` seconds
(setting ``rate_limit_max_wait``) raises :class:`~remem.errors.RateLimitError` at once, having taken
nothing, instead of hanging. After the call, :meth:`RateLimiter.settle` corrects the bucket with the
provider's token count.

The clock and the sleep are injected (``clock=``, ``sleep=``), so tests run without waiting.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from remem.errors import RateLimitError

__all__ = [
    "ANY_MODEL",
    "Backoff",
    "RateLimit",
    "RateLimiter",
    "acall_with_retries",
    "call_with_retries",
    "is_rate_limited",
    "retry_after",
    "shared_limiter",
]

T = TypeVar("T")
ANY_MODEL = "*"  # the limit of every model without its own row
_MINUTE = 60.0


@dataclass(frozen=True)
class RateLimit:
    """Requests and tokens (input + output) per minute; None: no limit of that kind."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


class _Bucket:
    def __init__(self, per_minute: float, now: float) -> None:
        self.capacity = float(per_minute)
        self.rate = self.capacity / _MINUTE  # per second
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_after(self, amount: float) -> float:
        """Seconds until the balance is back to zero once ``amount`` is taken."""
        short = amount - self.level
        return 0.0 if short <= 0 else short / self.rate


class RateLimiter:
    """Token buckets per model, safe to share between threads (and between an event loop's tasks)."""

    def __init__(
        self,
        limits: Mapping[str, RateLimit],
        *,
        max_wait: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.limits = dict(limits)
        self.max_wait = max_wait
        self.clock, self.sleep = clock, sleep
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> RateLimiter:
        """From ``Settings.rate_limits`` (rows of model, requests, tokens) and ``rate_limit_max_wait``."""
        rows: Iterable[tuple[str, float | None, float | None]] = settings.rate_limits
        kwargs.setdefault("max_wait", settings.rate_limit_max_wait)
        return cls({model: RateLimit(rpm, tpm) for model, rpm, tpm in rows}, **kwargs)

    def limit(self, model: str) -> RateLimit | None:
        return self.limits.get(model) or self.limits.get(ANY_MODEL)

    def _bucket(self, model: str, kind: str, per_minute: float, now: float) -> _Bucket:
        key = (model, kind)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(per_minute, now)
        bucket.refill(now)
        return bucket

    def reserve(self, model: str, tokens: int = 0) -> float:
        """Take one request and ``tokens`` for ``model``; the seconds to wait before sending.

        Raises :class:`RateLimitError` (taking nothing) when that wait is longer than ``max_wait``.
        """
        limit = self.limit(model)
        if limit is None:
            return 0.0
        with self._lock:
            now = self.clock()
            wanted: list[tuple[_Bucket, float, str]] = []
            if limit.requests_per_minute:
                wanted.append(
                    (self._bucket(model, "requests", limit.requests_per_minute, now), 1.0, "requests")
                )
            if limit.tokens_per_minute and tokens > 0:
                wanted.append((self._bucket(model, "tokens", limit.tokens_per_minute, now), tokens, "tokens"))
            waits = [(bucket.wait_after(amount), kind) for bucket, amount, kind in wanted]
            wait, kind = max(waits, default=(0.0, ""))
            if wait > self.max_wait:
                per_minute = limit.requests_per_minute if kind == "requests" else limit.tokens_per_minute
                raise RateLimitError(
                    f"model {model!r} is over its rate limit of {per_minute:g} {kind} per minute: this call "
                    f"({tokens:,} tokens) would wait {wait:.1f} s, longer than rate_limit_max_wait "
                    f"({self.max_wait:g} s, REMEM_RATE_LIMIT_MAX_WAIT); nothing was sent. Retry later, "
                    "send less, or raise the limit or the wait",
                    model=model,
                    wait=wait,
                )
            for bucket, amount, _ in wanted:
                bucket.level -= amount
            return wait

    def acquire(self, model: str, tokens: int = 0) -> float:
        """:meth:`reserve`, then sleep the wait; returns the seconds waited."""
        wait = self.reserve(model, tokens)
        if wait > 0:
            self.sleep(wait)
        return wait

    async def aacquire(self, model: str, tokens: int = 0) -> float:
        """Async version of :meth:`acquire` (sleeps with ``asyncio.sleep`` unless a sleep was injected)."""
        wait = self.reserve(model, tokens)
        if wait > 0:
            if self.sleep is time.sleep:
                await asyncio.sleep(wait)
            else:
                self.sleep(wait)
        return wait

    def settle(self, model: str, counted: int, actual: int) -> None:
        """Correct the token bucket once the provider said the call used ``actual`` tokens (``counted``
        were taken before it)."""
        limit = self.limit(model)
        if limit is None or not limit.tokens_per_minute or actual == counted:
            return
        with self._lock:
            bucket = self._bucket(model, "tokens", limit.tokens_per_minute, self.clock())
            bucket.level -= actual - counted


_shared: dict[tuple[Any, ...], RateLimiter] = {}
_shared_lock = threading.Lock()


def shared_limiter(settings: Any) -> RateLimiter | None:
    """The process's limiter for the settings' rate limits (the same object for the same limits, so every
    thread and every model built from them share the buckets); None when no limit is configured."""
    if not settings.rate_limits:
        return None
    key = (tuple(settings.rate_limits), settings.rate_limit_max_wait)
    with _shared_lock:
        limiter = _shared.get(key)
        if limiter is None:
            limiter = _shared[key] = RateLimiter.from_settings(settings)
        return limiter


# -- retries of provider 429s ------------------------------------------------------------------------


def _status(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        code = getattr(holder, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def is_rate_limited(exc: BaseException) -> bool:
    """Whether ``exc`` is a provider's "too many requests" (HTTP 429, as openai's and httpx's errors carry it)."""
    return _status(exc) == 429


def retry_after(exc: BaseException) -> float | None:
    """The seconds a 429's ``Retry-After`` (or ``retry-after-ms``) header asks for; None without one."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    try:
        if milliseconds is not None:
            return max(float(milliseconds) / 1000, 0.0)
        seconds = headers.get("retry-after")
        if seconds is not None:
            return max(float(seconds), 0.0)
    except ValueError:  # an HTTP date: rare from model providers; the backoff applies instead
        return None
    return None


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base * 2**n)) seconds,
    at least what ``Retry-After`` asks; at most ``retries`` retries, ``max_wait`` seconds of waiting in all.
    ``sleep`` and ``rand`` are injectable (tests)."""

    retries: int = 4
    base: float = 0.5
    cap: float = 30.0
    max_wait: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    rand: Callable[[], float] = field(default=random.random, compare=False)

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> Backoff:
        kwargs.setdefault("retries", settings.llm_max_retries)
        kwargs.setdefault("max_wait", settings.rate_limit_max_wait)
        return cls(**kwargs)

    def delay(self, attempt: int, asked: float | None) -> float:
        jittered = float(self.rand()) * min(self.cap, self.base * 2.0**attempt)
        return max(jittered, asked or 0.0)

    async def asleep(self, seconds: float) -> None:
        if self.sleep is time.sleep:
            await asyncio.sleep(seconds)
        else:
            self.sleep(seconds)


def _next_delay(exc: BaseException, attempt: int, waited: float, model: str, backoff: Backoff) -> float:
    if attempt >= backoff.retries:
        raise RateLimitError(
            f"model {model!r} answered 429 (too many requests) {attempt + 1} times; gave up after "
            f"{attempt} retries (llm_max_retries, REMEM_LLM_MAX_RETRIES). Retry later or lower the "
            f"rate limit in [remem.rate_limits]: {exc}",
            model=model,
            wait=waited,
        ) from exc
    delay = backoff.delay(attempt, retry_after(exc))
    if waited + delay > backoff.max_wait:
        raise RateLimitError(
            f"model {model!r} answered 429 (too many requests) and asks for a wait that would make "
            f"{waited + delay:.1f} s in all, longer than rate_limit_max_wait ({backoff.max_wait:g} s, "
            f"REMEM_RATE_LIMIT_MAX_WAIT); retry later: {exc}",
            model=model,
            wait=waited + delay,
        ) from exc
    return delay


def call_with_retries(call: Callable[[], T], *, model: str, backoff: Backoff | None = None) -> T:
    """Run ``call``; on a provider 429, wait (backoff, jitter, Retry-After honoured) and run it again.

    Other errors go up unchanged. Gives up with :class:`RateLimitError` after ``backoff.retries`` retries
    or when the waits would pass ``backoff.max_wait``.
    """
    backoff = backoff or Backoff()
    waited = 0.0
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not is_rate_limited(exc):
                raise
            delay = _next_delay(exc, attempt, waited, model, backoff)
        backoff.sleep(delay)
        waited += delay
        attempt += 1


async def acall_with_retries(
    call: Callable[[], Awaitable[T]], *, model: str, backoff: Backoff | None = None
) -> T:
    """Async version of :func:`call_with_retries`."""
    backoff = backoff or Backoff()
    waited = 0.0
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_rate_limited(exc):
                raise
            delay = _next_delay(exc, attempt, waited, model, backoff)
        await backoff.asleep(delay)
        waited += delay
        attempt += 1
