"""Signing in and out of the inspector, its home and its static files; ``register`` mounts every page."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import cookie_parser
from starlette.responses import Response

from remem.server._ui._assets import CSS, JS
from remem.server._ui._html import h, layout
from remem.server._ui._session import (
    SESSION_COOKIE,
    csrf_token,
    html_response,
    redirect,
    secure,
    valid_csrf,
)

__all__ = ["PREFIX", "PUBLIC", "is_ui", "register", "session_key", "signed_out"]

PREFIX = "/ui"
PUBLIC = frozenset({"/ui/login", "/ui/static/app.css", "/ui/static/app.js"})
router = APIRouter(prefix=PREFIX, include_in_schema=False)


def is_ui(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def session_key(path: str, headers: Mapping[str, str]) -> str | None:
    """The key a browser signed in with (its session cookie), for ``/ui`` requests only."""
    if not is_ui(path):
        return None
    return cookie_parser(headers.get("cookie", "")).get(SESSION_COOKIE) or None


def signed_out(headers: Mapping[str, str]) -> Response:
    """A request of the inspector without a valid session: to the sign-in page (the cookie cleared)."""
    return redirect("/ui/login", end_session=session_key(PREFIX, headers) is not None)


def _login_page(request: Request, message: str = "", status: int = 200) -> Response:
    token = csrf_token(request)
    body = h(
        '{}<form method="post" action="/ui/login" class="login">'
        '<input type="hidden" name="csrf" value="{}">'
        '<label for="key">API key of your tenant (<code>remem keys create --tenant T</code> prints one)</label>'
        '<input id="key" name="key" type="password" autocomplete="current-password" required size="50"> '
        '<button type="submit">Sign in</button></form>'
        "<p>The key is kept in a secure, HttpOnly session cookie for this site only, and never in a URL.</p>",
        h('<p class="error" role="alert">{}</p>', message) if message else "",
        token,
    )
    return html_response(request, layout("Sign in", body, who=None, csrf=token), status)


@router.get("/login")
def login_form(request: Request) -> Response:
    return _login_page(request)


@router.post("/login")
async def login(request: Request) -> Response:
    from remem.server.keys import has_keys, verify_key

    form = await request.form()
    if not valid_csrf(request, form):
        return _login_page(request, "The sign-in form is stale or came from another site; try again.", 403)
    secret = str(form.get("key", "")).strip()
    services = request.app.state.services

    def check() -> str | None:
        if not has_keys(services.store):
            return "open"
        info = verify_key(services.store, secret) if secret else None
        if info is None:
            return None
        return "admin" if info.role == "admin" else "tenant"

    kind = await run_in_threadpool(check)
    if kind is None:
        return _login_page(request, "That key is unknown, revoked or expired.", 401)
    if kind == "admin":
        return _login_page(request, "An admin key manages keys only: sign in with a tenant's key.", 403)
    if kind == "open":
        return redirect("/ui/threads")
    return redirect("/ui/threads", session=secret)


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await request.form()
    if not valid_csrf(request, form):
        return _login_page(request, "The form is stale; sign out again.", 403)
    return redirect("/ui/login", end_session=True)


@router.get("")
@router.get("/")
def home() -> Response:
    return redirect("/ui/threads")


def _asset(body: str, media_type: str) -> Response:
    response = Response(body, media_type=media_type)
    secure(response)
    response.headers["Cache-Control"] = "public, max-age=3600"
    return response


@router.get("/static/app.css")
def stylesheet() -> Response:
    return _asset(CSS, "text/css")


@router.get("/static/app.js")
def script() -> Response:
    return _asset(JS, "text/javascript")


def register(app: FastAPI) -> None:
    from remem.server._ui import _memories, _memory, _ops, _threads

    app.include_router(router)
    app.include_router(_threads.router)
    app.include_router(_memories.router)
    app.include_router(_memory.router)
    app.include_router(_ops.router)
