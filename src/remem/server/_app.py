"""The ASGI app of ``remem serve``: FastAPI routes over one :class:`~remem.server._services.Services`.

Endpoints are plain (sync) functions: FastAPI runs them in its thread pool, so database I/O never blocks
the event loop. remem's errors become status codes in one place (:func:`status_of`); anything else is a
500 whose body says only that it happened (the log has the traceback; no key is ever logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import json
import logging
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.routing import Route

from remem import errors
from remem.config import Settings, load_settings
from remem.server import _ui
from remem.server._guard import (
    BodyLimit,
    Message,
    Metrics,
    RateLimiter,
    Receive,
    Scope,
    Send,
    api_key_of,
    route_path,
    send_json,
)
from remem.server._lean import LeanRoutes
from remem.server._services import Principal, Services
from remem.server._shared_limit import SharedRateLimiter
from remem.server.keys import KeyCache

__all__ = ["ServerOptions", "create_app", "status_of"]

log = logging.getLogger("remem.server")

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json"})
ADMIN_PREFIX = "/v1/keys"


@dataclass(frozen=True)
class ServerOptions:
    """How a server runs: its database, body cap (bytes), rate limit (requests a minute per key, 0: none),
    and whether every request needs a key (always when bound beyond loopback)."""

    url: str
    max_body: int = 1_048_576
    rate_limit: float = 600.0
    require_keys: bool = False


_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (errors.NotFoundError, 404),
    (errors.BudgetExceededError, 403),
    (errors.RememUsageError, 422),
    (errors.ThreadBusyError, 409),
    (errors.SchemaTooNewError, 503),
    (errors.ErasureIncompleteError, 503),
    (errors.StorageError, 503),
    (errors.RateLimitError, 503),
    (errors.ModelError, 502),
    (errors.MissingDependencyError, 501),
    (errors.RememError, 500),
)


def status_of(exc: BaseException) -> int:
    """The status code a remem error answers with."""
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def error_response(
    status: int, detail: str, error: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"detail": detail, "error": error}, status_code=status, headers=headers)


def _route_of(request: Request) -> str:
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


class Guard:
    """The key, the rate limit, the admin/tenant split and the request metrics, as a plain ASGI
    middleware (no task or stream per request, as Starlette's ``@app.middleware`` costs). The key is
    checked from :class:`~remem.server.keys.KeyCache` on the event loop, and read from the store in the
    thread pool only when the cache does not know it."""

    def __init__(
        self,
        app: Any,
        *,
        options: ServerOptions,
        holder: dict[str, Any],
        metrics: Metrics,
        limiter: RateLimiter | SharedRateLimiter,
    ) -> None:
        self.app, self.options, self.holder = app, options, holder
        self.metrics, self.limiter = metrics, limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        metrics = self.metrics

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        metrics.in_flight.inc()
        try:
            await self._guarded(scope, receive, sent)
        finally:
            metrics.in_flight.dec()
            route = getattr(scope.get("route"), "path", None)
            metrics.observe(
                scope["method"], str(route) if route else "unmatched", status, time.perf_counter() - started
            )

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)  # as the routes see it: the admin rule must hold under a root path
        if path in PUBLIC_PATHS or path in _ui.PUBLIC:
            await self.app(scope, receive, send)
            return
        cache: KeyCache | None = self.holder.get("keys")
        if cache is None:
            await _refuse(send, 503, "the server is starting; retry in a moment", "Starting")
            return
        try:
            found = await self._principal(cache, path, Headers(scope=scope))
        except errors.RememError as exc:
            await _refuse(send, status_of(exc), str(exc), type(exc).__name__)
            return
        if isinstance(found, str):
            self.metrics.refused.labels("unauthorized").inc()
            if _ui.is_ui(path):  # a page: to the sign-in form
                await _ui.signed_out(Headers(scope=scope))(scope, receive, send)
                return
            await _refuse(send, 401, found, "Unauthorized")
            return
        limiter = self.limiter
        if isinstance(limiter, SharedRateLimiter):
            wait = await limiter.wait_for(found.key_id)
        else:
            wait = limiter.wait_for(found.key_id)
        if wait > 0:
            self.metrics.refused.labels("rate_limited").inc()
            after = RateLimiter.retry_after(wait)
            await _refuse(
                send, 429, f"too many requests for this key; retry in {after} s", "RateLimited", after
            )
            return
        admin_path = path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")
        if admin_path and not found.admin and found.tenant is not None:
            await _refuse(send, 403, "key management needs an admin key", "Forbidden")
            return
        if found.admin and not admin_path:
            await _refuse(
                send, 403, "an admin key manages keys only; use a tenant's key for its data", "Forbidden"
            )
            return
        scope.setdefault("state", {})["principal"] = found
        try:
            await self.app(scope, receive, send)
        finally:
            if admin_path and scope["method"] != "GET":
                cache.clear()  # a revoke or rotation here holds in this process at once

    async def _principal(self, cache: KeyCache, path: str, headers: Headers) -> Principal | str:
        """Who sent the request, or why it is refused (a page of ``/ui`` sends its key in its cookie)."""
        secret = api_key_of(headers) or _ui.session_key(path, headers)
        needed = self.options.require_keys or cache.keyed()
        if needed is None:
            needed = await run_in_threadpool(cache.has_keys)
        if not needed:
            return Principal("anonymous", None)
        if secret is None:
            return "this server needs an API key: send it as the X-Api-Key header"
        info = cache.lookup(secret)
        if info is None:
            info = await run_in_threadpool(cache.verify, secret)
        if info is None:
            return "the API key is unknown, revoked or expired"
        return Principal(info.key_id, info.tenant, admin=info.role == "admin")


async def _refuse(send: Send, status: int, detail: str, error: str, retry_after: str | None = None) -> None:
    headers = [(b"retry-after", retry_after.encode())] if retry_after else []
    body = json.dumps({"detail": detail, "error": error}).encode()
    await send_json(send, status, body, headers)


def _on_hangup(services: Services) -> None:
    """SIGHUP reads the configuration again (:meth:`Services.reload`), in the thread pool, in this process.

    Under ``--workers N`` uvicorn's supervisor takes the SIGHUP sent to it and replaces its workers one by
    one, each new one reading the configuration as it starts; a worker signalled itself reloads in place.
    """
    loop = asyncio.get_running_loop()

    def reload() -> None:
        try:
            services.reload()
        except errors.RememError as exc:
            log.error("SIGHUP: the configuration could not be read again; kept the old one: %s", exc)
            return
        log.warning("SIGHUP: the configuration is read again from the next request on")

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals in this thread
        loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, reload))


@contextlib.contextmanager
def _start_up_heap_frozen() -> Iterator[None]:
    """The objects alive once the server has started (its modules, the app, the pools: some 150,000) kept
    out of the garbage collector's full collections while it serves (``gc.freeze``), and given back to it
    at shutdown. A full collection walks every tracked object: on PostgreSQL, one took 118-146 ms of the
    worker's CPU and came once in 60 turns (add, card, search; 2.0-2.4 ms a turn), where the library in a
    process of its own had none in the same turns; frozen, a full collection walks only what requests made
    since (some 4,700 objects)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _limiter(options: ServerOptions) -> RateLimiter | SharedRateLimiter:
    """The per-key rate limit: in the database on PostgreSQL (several workers or machines draw from one
    bucket), in this process on SQLite (one process serves it)."""
    from remem._url import parse_database_url

    parsed = parse_database_url(options.url)
    if parsed.kind == "postgres" and options.rate_limit > 0:
        return SharedRateLimiter(parsed.target, options.rate_limit)
    return RateLimiter(options.rate_limit)


def create_app(options: ServerOptions, *, settings: Settings | None = None) -> Any:
    """The ASGI app serving the database of ``options.url`` (opened at start-up, closed at shutdown)."""
    from remem.server import _inspect, _langgraph, _langgraph_store, _v1

    settings = settings or load_settings()
    metrics = Metrics()
    limiter = _limiter(options)
    holder: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await run_in_threadpool(Services, options.url, settings)
        try:
            if isinstance(limiter, SharedRateLimiter):
                await limiter.open()
            holder["services"] = services
            holder["keys"] = KeyCache(services.store)
            app.state.services = services
            _on_hangup(services)
            async with mcp_endpoint.running():
                with _start_up_heap_frozen():
                    yield
        finally:
            if isinstance(limiter, SharedRateLimiter):
                await limiter.close()
            await run_in_threadpool(services.close)

    app = FastAPI(
        title="remem",
        version=_version(),
        summary="Memory for LangGraph agents, over HTTP: threads, context cards, search, erasure, usage.",
        lifespan=lifespan,
    )
    app.state.options = options
    app.state.metrics = metrics

    @app.exception_handler(errors.RememError)
    async def remem_error(request: Request, exc: errors.RememError) -> JSONResponse:
        status = status_of(exc)
        metrics.errors.labels(_route_of(request), type(exc).__name__).inc()
        if status >= 500:
            log.warning("%s %s: %s", request.method, _route_of(request), type(exc).__name__)
        headers = {"Retry-After": "1"} if isinstance(exc, errors.ThreadBusyError) else None
        return error_response(status, str(exc), type(exc).__name__, headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.errors.labels(_route_of(request), "RequestValidationError").inc()
        problems = []
        for err in exc.errors():
            loc = err.get("loc", ())
            if err.get("type") == "json_invalid":  # loc holds the position in the text, not a field
                where = f"body (not valid JSON at character {loc[-1] if loc else 0})"
            else:
                where = ".".join(str(p) for p in loc if p != "body") or "body"
            problems.append({"field": where, "message": str(err.get("msg", "")), "type": err.get("type")})
        detail = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
        return JSONResponse(
            {"detail": detail, "error": "RequestValidationError", "errors": problems}, status_code=422
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        metrics.errors.labels(_route_of(request), type(exc).__name__).inc()
        log.error("%s %s failed", request.method, _route_of(request), exc_info=exc)
        return error_response(500, "the server failed on this request; its log says why", "InternalError")

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    def readyz() -> JSONResponse:
        """The database answers and its schema is the one this remem writes."""
        try:
            _check_ready(options.url)
        except errors.RememError as exc:
            return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["operations"])
    def metrics_text() -> Response:
        """Prometheus metrics of this process."""
        body, content_type = metrics.text()
        return Response(body, media_type=content_type)

    metrics.watch(lambda: holder["services"].pools() if "services" in holder else {})
    app.add_middleware(
        LeanRoutes, api=app, routes=_v1.router.routes, hot=_v1.HOT
    )  # inside the guard: after the key and the limit
    app.add_middleware(Guard, options=options, holder=holder, metrics=metrics, limiter=limiter)
    _v1.register(app)
    _inspect.register(app)
    _langgraph.register(app)
    _langgraph_store.register(app)
    _ui.register(app)
    mcp_endpoint = _mount_mcp(app, holder, protect=not options.require_keys)
    return BodyLimit(app, options.max_body)


def _mount_mcp(app: FastAPI, holder: dict[str, Any], *, protect: bool) -> _LazyMCP:
    """The MCP tools at ``/mcp`` (streamable HTTP, stateless, JSON answers), behind the same guard: the
    tenant of a tool call is the request's key's. Without keys (loopback) the MCP transport's own check
    of the Host header stays on, against DNS rebinding. Built on the first ``/mcp`` request (:class:`_LazyMCP`)."""
    if importlib.util.find_spec("mcp") is None:  # missing at start-up, as when it was imported here
        raise errors.MissingDependencyError.for_extra("mcp", "server")
    endpoint = _LazyMCP(holder, protect=protect)
    app.router.routes.append(Route("/mcp", endpoint=endpoint))
    return endpoint


class _LazyMCP:
    """The ``/mcp`` endpoint, whose MCP SDK is imported and whose server is built on its first request: the
    SDK costs each worker's start-up a third of a second to a second, which a server nobody calls over MCP
    never needs. The SDK's session manager must run in the app's lifespan (its task group lives there), so
    :meth:`running`, entered by the lifespan, starts it when the first request asks and stops it at exit."""

    def __init__(self, holder: dict[str, Any], *, protect: bool) -> None:
        self._holder, self._protect = holder, protect
        self._endpoint: Any = None
        self._failure: BaseException | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._wanted, self._ready, self._stop = anyio.Event(), anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._serve)
            try:
                yield
            finally:
                self._stop.set()
                if not self._wanted.is_set():
                    group.cancel_scope.cancel()  # never asked for: nothing was built

    async def _serve(self) -> None:
        await self._wanted.wait()
        try:
            # the imports (the slow part) off the event loop; the server built on it (it makes anyio locks)
            await anyio.to_thread.run_sync(importlib.import_module, "remem.server._mcp")
            server, self._endpoint = self._build()
        except Exception as exc:  # each request raises it (a 500 with the log's reason)
            self._failure = exc
            self._ready.set()
            return
        async with server.session_manager.run():
            self._ready.set()
            await self._stop.wait()

    def _build(self) -> tuple[Any, Any]:
        from mcp.server.transport_security import TransportSecuritySettings

        from remem.server._mcp import build_mcp

        holder = self._holder

        def resolve(ctx: Any) -> tuple[Services, str | None]:
            request = ctx.request_context.request
            principal: Principal = request.state.principal
            return holder["services"], principal.tenant

        server = build_mcp(resolve)
        security = None if self._protect else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        mcp_app = server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True, transport_security=security
        )
        [route] = mcp_app.routes  # the transport's one route, without the SDK's auth (the guard does that)
        return server, route.app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self._wanted.set()
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure
        await self._endpoint(scope, receive, send)


def _check_ready(url: str) -> None:
    from remem import layout
    from remem._url import parse_database_url
    from remem.checkpoint import checkpointer_from_url
    from remem.store import open_store

    if parse_database_url(url).kind == "memory":
        return
    with open_store(url, read_only=True) as store:
        store.get(layout.namespace(layout.INTERNAL_ROOT, "ready"), "probe")  # any read will do
    with checkpointer_from_url(url, create=False) as saver:
        saver.get_tuple({"configurable": {"thread_id": "_remem.ready", "checkpoint_ns": ""}})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("remem")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
        return "0"
