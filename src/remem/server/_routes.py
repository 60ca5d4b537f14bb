"""A route whose sync endpoint's answer is turned into JSON in the endpoint's own trip to a thread.

FastAPI runs a sync endpoint in anyio's thread pool, then validates what it returned against the return
annotation in a second thread-pool call (``dict[str, Any]``, ``Any``: nothing a validation can refuse)
and serialises it on the event loop. :class:`JSONRoute` wraps the endpoint so that it returns the JSON
bytes itself, made by the serialiser FastAPI would have used (pydantic's, with its settings: the same
bytes): one trip to a thread a request instead of two, and no serialising on the loop. The trip is
:func:`in_pool`'s (the event loop's executor over a pool of the server's own), not anyio's: measured on
uvicorn with httptools and uvloop, a sync FastAPI endpoint cost about 0.17-0.45 ms more CPU a request than
an async one, the executor's trip about 0.03. The return annotation still describes the answer in the
OpenAPI document (FastAPI reads it through the wrapper). For endpoints whose return annotation is a JSON
value (a dict, a list, ``Any``), never a model that filters fields. A dataclass in the answer (a card, its
records) is written by pydantic's serialiser as :func:`remem.server._v1.as_json` would turn it into JSON
(its fields in order, tuples as lists), with no Python walk over it first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic_core
from fastapi import Response
from fastapi.routing import APIRoute

__all__ = ["JSONRoute", "in_pool"]

T = TypeVar("T")
POOL_THREADS = 40
"""The most endpoint calls that run at once in a server process (as anyio's default thread limit)."""
_POOL = concurrent.futures.ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="remem-endpoint")


async def in_pool(call: Callable[[], T]) -> T:
    """``call()`` in a thread of the endpoints' pool, off the event loop (database I/O never blocks it),
    in a copy of the caller's context. A cancelled request waits for its call to end, as anyio's trip
    does, so that nothing it began is left running when the request is over."""
    future = asyncio.get_running_loop().run_in_executor(_POOL, contextvars.copy_context().run, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise


class JSONResponseBytes(Response):
    media_type = "application/json"


def _serialized(endpoint: Callable[..., Any], status_code: int) -> Callable[..., Any]:
    def answer(*args: Any, **kwargs: Any) -> Any:
        value = endpoint(*args, **kwargs)
        if isinstance(value, Response):
            return value
        # inf_nan_mode: as FastAPI's serialiser (a TypeAdapter's default), null, never a bare NaN
        body = pydantic_core.to_json(value, inf_nan_mode="null")
        return JSONResponseBytes(body, status_code=status_code)

    @functools.wraps(endpoint)  # FastAPI reads the parameters and return type through __wrapped__
    async def in_thread(*args: Any, **kwargs: Any) -> Any:
        return await in_pool(functools.partial(answer, *args, **kwargs))

    return in_thread


def _sets_its_response(endpoint: Callable[..., Any]) -> bool:
    """Whether the endpoint takes FastAPI's ``Response`` to set headers or a status on (FastAPI copies
    them onto the answer it builds, not onto one the endpoint returns)."""
    try:
        params = inspect.signature(endpoint, eval_str=True).parameters.values()
    except NameError:  # an annotation this module cannot resolve: FastAPI's way, to be safe
        return True
    for param in params:
        if isinstance(param.annotation, type) and issubclass(param.annotation, Response):
            return True
    return False


class JSONRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose sync endpoint serialises its own answer (with the
    route's status code) in its one trip to :func:`in_pool`; an async endpoint, or one that sets headers
    on a ``Response`` parameter, is left to FastAPI (and anyio's thread pool)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint) and not _sets_its_response(endpoint):
            endpoint = _serialized(endpoint, kwargs.get("status_code") or 200)
        super().__init__(path, endpoint, **kwargs)
