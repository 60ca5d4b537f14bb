"""The hot endpoints (an add, a card, a search) answered without FastAPI's per-request machinery.

A request to one of :data:`remem.server._v1.HOT` is answered by :class:`LeanRoutes`, an ASGI layer between
the guard (:class:`~remem.server._app.Guard`: key, tenant, rate limit, metrics, which it passes first as
every request does) and FastAPI's own stack. Profiled (cProfile on the event loop's thread, an add, a card
and a search), FastAPI's router took 28% of the loop's CPU for a request (it tries the routes in turn, some
twenty before ``/v1``'s) and its dependency solver 14%, with exit stacks and telemetry hooks besides, for
endpoints that have no dependency.

What it does not change is what the endpoint is: the route is FastAPI's :class:`~fastapi.routing.APIRoute`
(still in the OpenAPI document, still ``scope["route"]``, so metrics name it as before); its path and body
are read and validated by FastAPI's own functions on the route's own fields (the same content-type rule,
the same 422 errors naming the field); the call is the route's endpoint (:class:`~remem.server._routes.
JSONRoute`'s, one trip to :func:`~remem.server._routes.in_pool`); an error is answered by the app's own
exception handlers (an error no handler takes goes on up, to the 500 handler, as from FastAPI's router).
"""

from __future__ import annotations

import email.message
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic_core import PydanticUndefined
from starlette.exceptions import HTTPException
from starlette.requests import Request

from remem.errors import ConfigError
from remem.server._guard import Receive, Scope, Send, route_path

__all__ = ["LeanRoutes"]

_UNSET: Any = PydanticUndefined  # FastAPI's mark of a request without a body (``fastapi._compat.Undefined``)


class _Hot:
    """One route of the lean path, and what reading its request needs, found once."""

    def __init__(self, route: APIRoute) -> None:
        needs = route.dependant
        beyond = (
            needs.dependencies
            or needs.query_params
            or needs.header_params
            or needs.cookie_params
            or needs.response_param_name
            or needs.background_tasks_param_name
            or needs.websocket_param_name
            or needs.security_scopes_param_name
        )
        if beyond:
            raise ConfigError(
                f"{route.path} takes more than its path, a JSON body and the request: leave it to FastAPI"
            )
        if not inspect.iscoroutinefunction(route.endpoint):  # a sync one would run on the event loop
            raise ConfigError(
                f"{route.path}'s endpoint is not a JSONRoute's (one trip to the pool): route it with one"
            )
        self.route = route
        self.methods = frozenset(route.methods or ())
        self.regex, self.convertors = route.path_regex, route.param_convertors
        self.endpoint: Callable[..., Any] = route.endpoint
        self.path_params, self.body_params = needs.path_params, needs.body_params
        self.embed: bool = route._embed_body_fields
        self.request_param = needs.request_param_name
        strict = route.strict_content_type
        self.strict: bool = strict.value if isinstance(strict, DefaultPlaceholder) else strict

    def match(self, scope: Scope) -> dict[str, Any] | None:
        """The path's parameters when the request is this route's (as Starlette's ``Route.matches``)."""
        if scope["method"] not in self.methods:
            return None
        found = self.regex.match(route_path(scope))
        if found is None:
            return None
        return {k: self.convertors[k].convert(v) for k, v in found.groupdict().items()}

    async def body(self, request: Request) -> Any:
        """The request's body as FastAPI's handler reads it: JSON when the content type says so (or, not
        strict, when there is none), the bytes otherwise (the body's validation then refuses them)."""
        raw = await request.body()
        if not raw:
            return _UNSET
        kind = request.headers.get("content-type")
        if not kind:
            is_json = not self.strict
        elif kind == "application/json":  # what clients send: the parse below, skipped
            is_json = True
        else:
            message = email.message.Message()
            message["content-type"] = kind
            subtype = message.get_content_subtype()
            is_json = message.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")
            )
        if not is_json:
            return raw
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            problem = {
                "type": "json_invalid",
                "loc": ("body", exc.pos),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": exc.msg},
            }
            raise RequestValidationError([problem], body=exc.doc) from exc
        except Exception as exc:  # as FastAPI: not JSON at all (a bad encoding)
            raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc

    async def arguments(self, request: Request, path_params: dict[str, Any]) -> dict[str, Any]:
        """The endpoint's arguments, validated by FastAPI's functions on the route's fields."""
        values, problems = request_params_to_args(self.path_params, path_params)
        if self.body_params:
            body = await self.body(request)
            found, refused = await request_body_to_args(
                body_fields=self.body_params,
                received_body=body,
                embed_body_fields=self.embed,
            )
            values.update(found)
            problems.extend(refused)
        if problems:
            raise RequestValidationError(problems)
        if self.request_param:
            values[self.request_param] = request
        return values


class LeanRoutes:
    """The ASGI layer that answers the ``hot`` routes (method and path, of ``routes``, a router included in
    ``api`` as it is) itself and passes every other request on to ``app`` (FastAPI's stack). Its answers
    and errors are the app's: see the module's docstring."""

    def __init__(
        self, app: Any, *, api: FastAPI, routes: Sequence[Any], hot: Sequence[tuple[str, str]]
    ) -> None:
        self.app = app
        found = {
            (method, route.path): route
            for route in routes
            if isinstance(route, APIRoute)
            for method in route.methods or ()
        }
        missing = [f"{m} {p}" for m, p in hot if (m, p) not in found]
        if missing:
            raise ConfigError(
                f"no such route for the lean path: {', '.join(missing)}; name a route of the router"
            )
        self.hot = tuple(_Hot(found[key]) for key in hot)
        # the handlers FastAPI's ExceptionMiddleware runs; Exception's (the 500) stays the outer middleware's
        self.handlers = {
            key: handler for key, handler in api.exception_handlers.items() if key not in (500, Exception)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for hot in self.hot:
                path_params = hot.match(scope)
                if path_params is not None:
                    await self._answer(hot, path_params, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _answer(
        self, hot: _Hot, path_params: dict[str, Any], scope: Scope, receive: Receive, send: Send
    ) -> None:
        scope["route"], scope["endpoint"], scope["path_params"] = hot.route, hot.endpoint, path_params
        request = Request(scope, receive, send)
        try:
            response = await hot.endpoint(**await hot.arguments(request, path_params))
        except Exception as exc:
            handler = self._handler_of(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler_of(self, exc: Exception) -> Any:
        """The app's handler of ``exc``, by its class's MRO (Starlette's rule)."""
        for cls in type(exc).__mro__:
            if cls in self.handlers:
                return self.handlers[cls]
        return None
