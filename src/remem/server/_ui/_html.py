"""HTML for the inspector: every value escaped unless it is :class:`Html` built here, one page layout.

Stored text is hostile (a message may hold ``<script>``, an attribute breaker, a prompt injection): it
reaches a page only through :func:`esc` (``html.escape`` with quotes), so it is shown as text, never run.
Templates are literals of this package; :func:`h` fills them with escaped values. No inline script or
style anywhere (the Content-Security-Policy forbids both): sizes are SVG attributes, behaviour is in
``/ui/static/app.js``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

__all__ = ["Html", "esc", "h", "join", "layout", "link", "money", "number", "table", "url"]


class Html(str):
    """Markup that is safe as it is (built by :func:`h` from a literal template)."""

    __slots__ = ()


def esc(value: Any) -> Html:
    """``value`` as text in a page: itself when it is :class:`Html`, else escaped (quotes too)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def h(template: str, *args: Any, **kwargs: Any) -> Html:
    """The literal ``template`` with its ``{}`` fields filled by escaped values."""
    return Html(template.format(*(esc(a) for a in args), **{k: esc(v) for k, v in kwargs.items()}))


def join(parts: Iterable[Any], sep: str = "") -> Html:
    return Html(sep.join(esc(p) for p in parts))


def url(path: str, params: Mapping[str, Any] | None = None) -> str:
    """``path`` with ``params`` (None and "" left out) as a query string, percent-encoded."""
    kept = {k: v for k, v in (params or {}).items() if v is not None and v != ""}
    return f"{path}?{urlencode(kept)}" if kept else path


def link(text: Any, path: str, params: Mapping[str, Any] | None = None, **attrs: str) -> Html:
    extra = "".join(h(' {}="{}"', k.rstrip("_").replace("_", "-"), v) for k, v in attrs.items())
    return h('<a href="{}"{}>{}</a>', url(path, params), Html(extra), text)


NAV = (
    ("Threads", "/ui/threads"),
    ("Memories", "/ui/memories"),
    ("Usage", "/ui/usage"),
    ("Jobs", "/ui/jobs"),
    ("Ingestions", "/ui/ingestions"),
)


def layout(title: str, body: Html, *, who: str | None, csrf: str, current: str = "") -> Html:
    """A whole page: header with the sections and sign-out, then ``body`` in ``<main>``."""
    items = join(
        h(
            '<li><a href="{}"{}>{}</a></li>',
            path,
            Html(' aria-current="page"' if path == current else ""),
            name,
        )
        for name, path in NAV
    )
    account = ""
    if who is not None:
        account = h(
            '<form method="post" action="/ui/logout" class="signout"><span>{}</span>'
            '<input type="hidden" name="csrf" value="{}"><button type="submit">Sign out</button></form>',
            who,
            csrf,
        )
    return h(
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        "<title>{title} · remem inspector</title>"
        '<link rel="stylesheet" href="/ui/static/app.css">'
        '<script src="/ui/static/app.js" defer></script></head>'
        '<body><a class="skip" href="#main">Skip to the content</a>'
        '<header><a class="brand" href="/ui/threads">remem</a>'
        '<nav aria-label="Sections"><ul>{items}</ul></nav>{account}</header>'
        '<main id="main" tabindex="-1"><h1>{title}</h1>{body}</main></body></html>',
        title=title,
        items=items,
        account=Html(account),
        body=body,
    )


def table(headers: Iterable[Any], rows: Iterable[Iterable[Any]], *, caption: str, cls: str = "") -> Html:
    head = join(h('<th scope="col">{}</th>', c) for c in headers)
    body = join(h("<tr>{}</tr>", join(h("<td>{}</td>", c) for c in row)) for row in rows)
    return h(
        '<div class="scroll"><table class="{}"><caption>{}</caption><thead><tr>{}</tr></thead>'
        "<tbody>{}</tbody></table></div>",
        cls,
        caption,
        head,
        body,
    )


def number(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    if digits:
        return f"{value:,.{digits}f}"
    return f"{int(value):,}"


def money(value: float | None) -> str:
    return "unpriced" if value is None else f"{value:.4f}"
