"""A route whose sync endpoint's answer is turned into JSON in the endpoint's own thread-pool call.

FastAPI runs a sync endpoint in its thread pool, then validates what it returned against the return
annotation in a second thread-pool call (``dict[str, Any]``, ``Any``: nothing a validation can refuse)
and serialises it on the event loop. :class:`JSONRoute` wraps the endpoint so that it returns the JSON
bytes itself, made by the serialiser FastAPI would have used (pydantic's, the same bytes): one hop to the
thread pool a request instead of two, and no serialising on the loop. The return annotation still
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


def _serialized(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(endpoint)  # FastAPI reads the parameters and return type through __wrapped__
    def answer(*args: Any, **kwargs: Any) -> Any:
        value = endpoint(*args, **kwargs)
        if isinstance(value, Response):
            return value
        return JSONResponseBytes(pydantic_core.to_json(value))

    return answer


class JSONRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose sync endpoint serialises its own answer."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = _serialized(endpoint)
        super().__init__(path, endpoint, **kwargs)
