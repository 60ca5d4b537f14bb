"""Signing in to the inspector, and what guards its pages: the session cookie, CSRF, security headers.

- **Session**: the tenant's API key, given once on the sign-in form, is kept in the ``remem_session``
  cookie: ``HttpOnly`` (no script reads it), ``Secure`` (sent over HTTPS, and to loopback), ``SameSite=Strict``
  (no other site's page sends it), ``Path=/ui``. Never in a URL, never in local storage. The server's
  guard reads it for ``/ui`` requests exactly as the ``X-Api-Key`` header, so a page sees what the key's
  tenant may see and nothing else.
- **CSRF**: every form that changes something carries a token equal to the ``remem_csrf`` cookie (random,
  HttpOnly, SameSite=Strict; double submit), and a request whose ``Origin`` is another site's is refused.
- **Headers**: a strict Content-Security-Policy (own scripts and styles only, no inline code, no frames,
  forms post here only), ``nosniff``, referrers to this site only (a browser sends ``Origin: null`` under ``no-referrer``), no caching of pages that show stored data.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

__all__ = [
    "CSRF_COOKIE",
    "SESSION_COOKIE",
    "csrf_token",
    "html_response",
    "origin_ok",
    "redirect",
    "secure",
    "valid_csrf",
]

SESSION_COOKIE = "remem_session"
CSRF_COOKIE = "remem_csrf"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 8 * 3600

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def secure(response: Response) -> Response:
    """``response`` with the inspector's security headers."""
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response


def csrf_token(request: Request) -> str:
    """The CSRF token of this browser (a new one is set by :func:`html_response` when it has none)."""
    found = request.cookies.get(CSRF_COOKIE, "")
    if len(found) == 43:
        return found
    token = getattr(request.state, "new_csrf", None)
    if token is None:
        token = request.state.new_csrf = secrets.token_urlsafe(32)
    return str(token)


def _set_cookie(response: Response, name: str, value: str, max_age: int | None) -> None:
    response.set_cookie(
        name, value, max_age=max_age, path=COOKIE_PATH, secure=True, httponly=True, samesite="strict"
    )


def html_response(request: Request, body: str, status: int = 200) -> Response:
    response = HTMLResponse(body, status_code=status)
    new = getattr(request.state, "new_csrf", None)
    if new is not None:
        _set_cookie(response, CSRF_COOKIE, str(new), None)
    return secure(response)


def redirect(path: str, *, session: str | None = None, end_session: bool = False) -> Response:
    """A 303 to ``path`` (a page of this server), setting or ending the session cookie."""
    response = RedirectResponse(path, status_code=303)
    if session is not None:
        _set_cookie(response, SESSION_COOKIE, session, SESSION_SECONDS)
    if end_session:
        response.delete_cookie(
            SESSION_COOKIE, path=COOKIE_PATH, secure=True, httponly=True, samesite="strict"
        )
    return secure(response)


def origin_ok(request: Request) -> bool:
    """False when the request says it comes from a page of another origin."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


def valid_csrf(request: Request, form: Any) -> bool:
    """The form's token is this browser's and the request comes from this origin."""
    given = form.get("csrf") if form is not None else None
    cookie = request.cookies.get(CSRF_COOKIE)
    if not isinstance(given, str) or not cookie or not origin_ok(request):
        return False
    return hmac.compare_digest(given.encode(), cookie.encode())
