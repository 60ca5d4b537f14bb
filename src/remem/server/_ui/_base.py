"""What every inspector page shares: who is signed in, the CSRF token, and rendering a page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from remem.errors import NotFoundError, RememError, RememUsageError
from remem.server._services import Principal, Services
from remem.server._ui._html import Html, h, layout
from remem.server._ui._session import csrf_token, html_response, valid_csrf

__all__ = ["NOTICES", "Context", "context", "csrf_field", "failure", "guarded", "page", "whole"]

# What a redirect after a change may announce (?done=NAME): fixed texts, never text from the request.
NOTICES = {
    "deleted": "The memory was deleted.",
    "edited": "The memory was saved.",
    "retried": "The job was queued again.",
    "parked": "The job was parked.",
    "undone": "The ingestion was undone: what it added is gone.",
}


@dataclass(frozen=True)
class Context:
    request: Request
    services: Services
    tenant: str | None
    csrf: str

    @property
    def who(self) -> str:
        return f"tenant {self.tenant}" if self.tenant is not None else "local database (no keys)"


def context(request: Request) -> Context:
    principal: Principal = request.state.principal
    return Context(request, request.app.state.services, principal.tenant, csrf_token(request))


def csrf_field(ctx: Context) -> Html:
    return h('<input type="hidden" name="csrf" value="{}">', ctx.csrf)


def page(ctx: Context, title: str, body: Html, *, current: str = "", status: int = 200) -> Response:
    notice = NOTICES.get(ctx.request.query_params.get("done", ""))
    if notice:
        body = h('<p class="flash" role="status">{}</p>{}', notice, body)
    return html_response(
        ctx.request, layout(title, body, who=ctx.who, csrf=ctx.csrf, current=current), status
    )


async def checked_form(request: Request, ctx: Context) -> tuple[Any, Response | None]:
    """A mutation's form, with the 403 page to answer instead when its CSRF token is missing or wrong."""
    form = await request.form()
    if valid_csrf(request, form):
        return form, None
    stale = h(
        '<p class="error" role="alert">{}</p>',
        "The form is stale or came from another site: reload the page and try again.",
    )
    return form, page(ctx, "Refused", stale, status=403)


def failure(ctx: Context, exc: Exception) -> Response:
    """A page for a remem error: 404 for what the tenant has not, 422 for bad input."""
    status = 404 if isinstance(exc, NotFoundError) else 422 if isinstance(exc, RememUsageError) else 503
    return page(
        ctx,
        "Not found" if status == 404 else "Cannot show this",
        h('<p class="error" role="alert">{}</p>', str(exc)),
        status=status,
    )


def guarded(ctx: Context, build: Callable[[], Response]) -> Response:
    try:
        return build()
    except RememError as exc:
        return failure(ctx, exc)


def whole(value: Any, default: int, least: int = 0, most: int = 1_000_000) -> int:
    """A page number or size from a query string: its default when missing or not a number."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return min(max(number, least), most)
