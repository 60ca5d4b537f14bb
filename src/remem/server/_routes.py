"""A route whose sync endpoint's answer is turned into JSON in the endpoint's own thread-pool call.

FastAPI runs a sync endpoint in its thread pool, then validates what it returned against the return
annotation in a second thread-pool call (``dict[str, Any]``, ``Any``: nothing a validation can refuse)
and serialises it on the event loop. :class:`JSONRoute` wraps the endpoint so that it returns the JSON
bytes itself, made by the serialiser FastAPI would have used (pydantic's, with its settings: the same
bytes): one hop to the thread pool a request instead of two, and no serialising on the loop. The return annotation still
describes the answer in the OpenAPI document (FastAPI reads it through the wrapper). For endpoints
whose return annotation is a JSON value (a dict, a list, ``Any``), never a model that filters fields.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pydantic_core
from fastapi import Response
from fastapi.routing import APIRoute

__all__ = ["JSONRoute"]


class JSONResponseBytes(Response):
    media_type = "application/json"


def _serialized(endpoint: Callable[..., Any], status_code: int) -> Callable[..., Any]:
    @functools.wraps(endpoint)  # FastAPI reads the parameters and return type through __wrapped__
    def answer(*args: Any, **kwargs: Any) -> Any:
        value = endpoint(*args, **kwargs)
        if isinstance(value, Response):
            return value
        # inf_nan_mode: as FastAPI's serialiser (a TypeAdapter's default), null, never a bare NaN
        body = pydantic_core.to_json(value, inf_nan_mode="null")
        return JSONResponseBytes(body, status_code=status_code)

    return answer


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
    route's status code); an async endpoint, or one that sets headers on a ``Response`` parameter, is
    left to FastAPI."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint) and not _sets_its_response(endpoint):
            endpoint = _serialized(endpoint, kwargs.get("status_code") or 200)
        super().__init__(path, endpoint, **kwargs)
