"""The inspector's thread pages: the list, a thread's messages, its card and summary, its timeline."""

from __future__ import annotations

import difflib
import json
import math
import re
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from remem.memory import StoredMessage
from remem.server._ui import _data
from remem.server._ui._base import Context, context, guarded, page, whole
from remem.server._ui._charts import budget_bar, turn_chart
from remem.server._ui._html import Html, h, join, link, money, number, table, url

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
THREADS_PAGE = 25
MESSAGES_PAGE = 50
FOLD_CHARS = 600
SORTS = {
    "last": ("last activity", lambda r: r.last_activity),
    "size": ("messages", lambda r: r.messages),
    "tokens": ("tokens", lambda r: r.spend.tokens),
    "cost": ("cost", lambda r: r.spend.cost),
    "id": ("thread id", lambda r: r.thread_id),
}


def _pager(path: str, params: dict[str, Any], current: int, pages: int, label: str) -> Html:
    if pages <= 1:
        return Html("")
    before = (
        link("← Previous", path, {**params, "page": current - 1}, rel="prev") if current > 1 else Html("")
    )
    after = link("Next →", path, {**params, "page": current + 1}, rel="next") if current < pages else Html("")
    first = link("First", path, {**params, "page": 1}) if current > 2 else Html("")
    last = link("Last", path, {**params, "page": pages}) if current < pages - 1 else Html("")
    return h(
        '<nav class="pager" aria-label="{}">{}{}<span>page {} of {}</span>{}{}</nav>',
        label,
        first,
        before,
        current,
        pages,
        after,
        last,
    )


def _options(values: list[tuple[str, str]], chosen: str) -> Html:
    return join(
        h('<option value="{}"{}>{}</option>', v, Html(" selected" if v == chosen else ""), text)
        for v, text in values
    )


def _amount(text: str | None) -> float | None:
    """A cost from a query string (None when missing, not a number or not above 0)."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _match(hit: Any) -> Html:
    """A thread's best matching message: a link to it on its page, and the start of its text."""
    target = url("/ui/thread", {"id": hit.thread_id, "page": hit.seq // MESSAGES_PAGE + 1}) + f"#m{hit.seq}"
    text = hit.content if len(hit.content) <= 120 else hit.content[:120] + "…"
    return h('<a href="{}">#{}</a> {}', target, hit.seq, text)


@router.get("/threads")
def threads_page(request: Request) -> Response:
    ctx = context(request)
    q = request.query_params
    user, find, said = q.get("user", ""), q.get("q", ""), q.get("text", "").strip()
    sort = q.get("sort", "") if q.get("sort") in SORTS or (said and q.get("sort") == "match") else ""
    sort = sort or ("match" if said else "last")
    order = "asc" if q.get("order") == "asc" else "desc"
    since = q.get("since", "") if re.fullmatch(r"\d{4}-\d{2}-\d{2}", q.get("since", "")) else ""
    least = {name: whole(q.get(name), 0) for name in ("min", "min_tokens")}
    least_cost = _amount(q.get("min_cost"))

    def wanted(r: _data.ThreadRow) -> bool:
        """The row passes the filters of size, tokens, cost and last activity (ISO texts sort as dates)."""
        return (
            r.messages >= least["min"]
            and r.spend.tokens >= least["min_tokens"]
            and (least_cost is None or (r.spend.priced_cost or 0.0) >= least_cost)
            and (not since or r.last_activity[:10] >= since)
        )

    def build() -> Response:
        rows = _data.thread_rows(ctx.services, ctx.tenant)
        users = sorted({r.user_id for r in rows if r.user_id})
        hits = _data.thread_hits(ctx.services, ctx.tenant, said, user or None) if said else {}
        kept = [
            r
            for r in rows
            if (not user or r.user_id == user)
            and (not find or find.lower() in r.thread_id.lower())
            and (not said or r.thread_id in hits)
            and wanted(r)
        ]
        if sort == "match":  # best match first, as the search ranked them
            rank = {t: n for n, t in enumerate(hits)}
            kept.sort(key=lambda r: rank[r.thread_id], reverse=order == "asc")
        else:
            kept.sort(key=SORTS[sort][1], reverse=order == "desc")
        pages = max(1, math.ceil(len(kept) / THREADS_PAGE))
        current = whole(q.get("page"), 1, 1, pages)
        shown = kept[(current - 1) * THREADS_PAGE : current * THREADS_PAGE]
        params: dict[str, Any] = {"user": user, "q": find, "text": said, "sort": sort, "order": order}
        params |= {"since": since, **{k: v or "" for k, v in least.items()}}
        params["min_cost"] = q.get("min_cost", "") if least_cost else ""
        sorts = [(k, v[0]) for k, v in SORTS.items()] + ([("match", "best match")] if said else [])
        form = h(
            '<form class="filters" method="get" action="/ui/threads" role="search">'
            '<label>Thread id contains<input name="q" value="{}"></label>'
            '<label>Messages say<input name="text" type="search" value="{}"></label>'
            '<label>User<select name="user" data-autosubmit><option value="">every user</option>{}</select></label>'
            '<label>Active since<input name="since" type="date" value="{}"></label>'
            '<label>Messages at least<input name="min" type="number" min="0" value="{}"></label>'
            '<label>Tokens at least<input name="min_tokens" type="number" min="0" value="{}"></label>'
            '<label>Cost at least<input name="min_cost" type="number" min="0" step="any" value="{}"></label>'
            '<label>Sort by<select name="sort" data-autosubmit>{}</select></label>'
            '<label>Order<select name="order" data-autosubmit>{}</select></label>'
            '<button type="submit">Show</button></form>',
            find,
            said,
            _options([(u, u) for u in users], user),
            since,
            least["min"] or "",
            least["min_tokens"] or "",
            params["min_cost"],
            _options(sorts, sort),
            _options([("desc", "highest / newest first"), ("asc", "lowest / oldest first")], order),
        )
        body_rows = [
            (
                link(r.thread_id, "/ui/thread", {"id": r.thread_id}),
                r.user_id or "–",
                Html(h('<span class="num">{}</span>', number(r.messages))),
                r.last_activity,
                number(r.spend.tokens),
                money(r.spend.priced_cost) if r.spend.calls else "–",
                *([_match(hits[r.thread_id])] if said else []),
            )
            for r in shown
        ]
        headers = ["Thread", "User", "Messages", "Last activity", "Tokens", "Cost"]
        caption = f"{len(kept)} threads" + (f" of user {user}" if user else "")
        listing = (
            table(
                [*headers, *(["Matching message"] if said else [])],
                body_rows,
                caption=caption + (f" whose messages say {said!r}" if said else ""),
                cls="threads",
            )
            if kept
            else h(
                '<p class="empty">{}</p>', "No threads match." if rows else "This tenant has no threads yet."
            )
        )
        return page(
            ctx,
            "Threads",
            h("{}{}{}", form, listing, _pager("/ui/threads", params, current, pages, "Thread pages")),
            current="/ui/threads",
        )

    return guarded(ctx, build)


def _tabs(thread_id: str, current: str) -> Html:
    tabs = (
        ("Messages", "/ui/thread"),
        ("Context card", "/ui/thread/card"),
        ("Timeline", "/ui/thread/timeline"),
        ("Tokens", "/ui/thread/usage"),
    )
    return h(
        '<nav class="tabs" aria-label="Thread views">{}</nav>',
        join(
            h(
                '<a href="{}"{}>{}</a>',
                url(path, {"id": thread_id}),
                Html(' aria-current="page"' if path == current else ""),
                name,
            )
            for name, path in tabs
        ),
    )


def _text(content: str) -> Html:
    if len(content) <= FOLD_CHARS:
        return h('<pre class="text">{}</pre>', content)
    return h(
        '<details><summary>{}… ({} characters)</summary><pre class="text">{}</pre></details>',
        content[:200],
        len(content),
        content,
    )


def _tool(content: str, about: str) -> Html:
    """A tool's result, folded whatever its length."""
    return h(
        '<details><summary>tool result{} ({} characters)</summary><pre class="text">{}</pre></details>',
        about,
        len(content),
        content,
    )


def _message(m: StoredMessage) -> Html:
    calls = m.metadata.get("tool_calls")
    extra = Html("")
    if isinstance(calls, list) and calls:
        extra = h(
            '<details><summary>{} tool call(s)</summary><pre class="json">{}</pre></details>',
            len(calls),
            json.dumps(calls, indent=2, ensure_ascii=False, default=str),
        )
    call_id = m.metadata.get("tool_call_id")
    about = f" · answers {call_id}" if call_id else ""
    body = _tool(m.content, about) if m.role == "tool" else _text(m.content)
    return h(
        '<article class="msg {}" id="m{}" aria-label="message {}"><div class="meta">#{} · {} · {} · id {}</div>{}{}</article>',
        m.role,
        m.seq,
        m.seq,
        m.seq,
        m.role,
        m.timestamp,
        m.id,
        body,
        extra,
    )


def _head(ctx: Context, thread_id: str) -> tuple[Any, Html]:
    info = ctx.services.memory_for(ctx.tenant).get_thread(thread_id).info()
    facts = h(
        '<dl class="facts"><dt>User</dt><dd>{}</dd><dt>Agent</dt><dd>{}</dd><dt>Created</dt><dd>{}</dd>'
        "<dt>Messages</dt><dd>{}</dd><dt>Summary revision</dt><dd>{}</dd></dl>",
        info.user_id or "–",
        info.agent_id or "–",
        info.created_at,
        number(info.message_count),
        info.summary_revision,
    )
    return info, facts


@router.get("/thread")
def thread_page(request: Request) -> Response:
    ctx = context(request)
    thread_id = request.query_params.get("id", "")

    def build() -> Response:
        info, facts = _head(ctx, thread_id)
        pages = max(1, math.ceil(info.message_count / MESSAGES_PAGE))
        current = whole(request.query_params.get("page"), pages, 1, pages)  # the latest page by default
        thread = ctx.services.memory_for(ctx.tenant).get_thread(thread_id)
        messages, total = thread.message_page((current - 1) * MESSAGES_PAGE, MESSAGES_PAGE)
        pager = _pager("/ui/thread", {"id": thread_id}, current, pages, "Message pages")
        listing = join(_message(m) for m in messages) or h('<p class="empty">{}</p>', "No messages yet.")
        body = h(
            '{}{}<h2>Messages {}–{} of {}</h2>{}<section class="messages" aria-label="Messages">{}</section>{}',
            facts,
            _tabs(thread_id, "/ui/thread"),
            (current - 1) * MESSAGES_PAGE + 1 if messages else 0,
            (current - 1) * MESSAGES_PAGE + len(messages),
            number(total),
            pager,
            listing,
            pager,
        )
        return page(ctx, f"Thread {thread_id}", body, current="/ui/threads")

    return guarded(ctx, build)


def _revisions(summaries: list[Any]) -> Html:
    items = []
    previous = ""
    for s in summaries:
        changes = [
            line
            for line in difflib.unified_diff(previous.split(". "), s.text.split(". "), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        diff = join(
            h('<span class="{}">{}</span>\n', "added" if c[0] == "+" else "removed", c) for c in changes
        )
        items.append(
            h(
                "<li><details><summary>revision {} · covers {} messages · {} · {}</summary>"
                '<p>What changed:</p><pre class="json">{}</pre></details></li>',
                s.revision,
                s.covered_count,
                s.created_at or "–",
                s.model or "extractive",
                diff or "(nothing)",
            )
        )
        previous = s.text
    return (
        h("<ol>{}</ol>", join(reversed(items))) if items else h('<p class="empty">{}</p>', "No summary yet.")
    )


@router.get("/thread/card")
def card_page(request: Request) -> Response:
    ctx = context(request)
    q = request.query_params
    thread_id = q.get("id", "")
    budget = whole(q.get("budget"), 1500, 1, 1_000_000)
    recent = whole(q.get("recent"), 0, 0, 10_000)
    tail = whole(q.get("except_last"), 0, 0, 10_000)
    query = q.get("query") or None

    def build() -> Response:
        info, facts = _head(ctx, thread_id)
        thread = ctx.services.memory_for(ctx.tenant).get_thread(thread_id)
        # Reads never write: the preview does not extend the summary as a turn's card would.
        card = thread.preview_context_card(
            except_last_messages=tail, max_recent_messages=recent, token_budget=budget, query=query
        )
        sections = _data.card_sections(thread.memory, card)
        summaries = thread.summaries()
        used = next((s for s in summaries if s.revision == card.summary_revision), None)
        boundary = max(info.message_count - max(tail, recent), 0)
        waiting = boundary - (used.covered_count if used else 0)
        preview = h(
            '<p class="note" id="card-preview">{}</p>',
            "Built for this page without writing anything. "
            + (
                f"Its summary is stored revision {used.revision}, covering {used.covered_count} messages. "
                if used
                else "No stored summary yet. "
            )
            + (
                f"{waiting} message(s) since then: a turn's card would first extend the summary "
                f"(after {info.context_summary_update_frequency} new messages, or at once while there is none)."
                if waiting > 0
                else "The card a turn gets now is the same."
            ),
        )
        form = h(
            '<form class="filters" method="get" action="/ui/thread/card"><input type="hidden" name="id" value="{}">'
            '<label>Token budget<input name="budget" type="number" min="1" value="{}"></label>'
            '<label>Recent messages in the card<input name="recent" type="number" min="0" value="{}"></label>'
            '<label>Leave out the last<input name="except_last" type="number" min="0" value="{}"></label>'
            '<label>Query (default: the latest user message)<input name="query" value="{}"></label>'
            '<button type="submit">Build the card</button></form>',
            thread_id,
            budget,
            recent,
            tail,
            query or "",
        )
        shown = (
            h('<pre class="card" id="card-content">{}</pre>', card.content)
            if card.content
            else h('<p class="empty" id="card-content">{}</p>', "The card is empty: nothing to say yet.")
        )
        why = join(
            h(
                "<li>{} <code>{}</code> ({}, score {})</li>",
                r.type,
                r.id,
                r.speaker or r.status,
                f"{r.score:.3f}",
            )
            for r in card.records
        )
        body = h(
            "{}{}{}{}<h2>Budget</h2>{}<h2>The card as the model receives it</h2>"
            "<p>Sent as a user-role message named <code>memory_context_card</code>.</p>{}"
            "<h2>Why these records</h2>{}<h2>Summary</h2>{}<h3>Revisions</h3>{}",
            facts,
            _tabs(thread_id, "/ui/thread/card"),
            form,
            preview,
            budget_bar(sections, budget),
            shown,
            h("<ul>{}</ul>", why) if card.records else h('<p class="empty">{}</p>', "No records recalled."),
            h('<pre class="text">{}</pre>', card.summary)
            if card.summary
            else h('<p class="empty">{}</p>', "No summary yet."),
            _revisions(summaries),
        )
        return page(ctx, f"Thread {thread_id}: context card", body, current="/ui/threads")

    return guarded(ctx, build)


def _state_message(m: Any, position: int) -> Html:
    if not isinstance(m, dict):
        return h('<article class="msg"><pre class="text">{}</pre></article>', json.dumps(m, default=str))
    kind = str(m.get("type", "message"))
    role = {"human": "user", "ai": "assistant"}.get(kind, kind)
    content = m.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    calls = m.get("tool_calls") or []
    extra = (
        h(
            '<details><summary>{} tool call(s)</summary><pre class="json">{}</pre></details>',
            len(calls),
            json.dumps(calls, indent=2, ensure_ascii=False, default=str),
        )
        if calls
        else Html("")
    )
    body = _tool(text, "") if role == "tool" else _text(text)
    return h(
        '<article class="msg {}"><div class="meta">#{} · {}{}</div>{}{}</article>',
        role,
        position,
        role,
        f" · {m.get('name')}" if m.get("name") else "",
        body,
        extra,
    )


@router.get("/thread/timeline")
def timeline_page(request: Request) -> Response:
    ctx = context(request)
    thread_id = request.query_params.get("id", "")
    chosen = request.query_params.get("checkpoint", "")

    def build() -> Response:
        _, facts = _head(ctx, thread_id)
        points = _data.checkpoints(ctx.services, ctx.tenant, thread_id)
        if not points:
            return page(
                ctx,
                f"Thread {thread_id}: timeline",
                h(
                    '{}{}<p class="empty">{}</p>',
                    facts,
                    _tabs(thread_id, "/ui/thread/timeline"),
                    "No checkpoints: no graph has run on this thread with remem's checkpointer.",
                ),
                current="/ui/threads",
            )
        picked = chosen or points[0]["id"]
        items = join(
            h(
                '<li{}><a href="{}">step {} · {} · {} · {} messages</a></li>',
                Html(' aria-current="step"' if p["id"] == picked else ""),
                url("/ui/thread/timeline", {"id": thread_id, "checkpoint": p["id"]}),
                p["step"],
                p["source"] or "–",
                p["ts"],
                p["messages"],
            )
            for p in points
        )
        state = _data.state_at(ctx.services, ctx.tenant, thread_id, picked)
        values = dict(state.get("values") or {})
        messages = values.pop("messages", [])
        messages = messages if isinstance(messages, list) else []
        shown = messages[-MESSAGES_PAGE:]
        first = len(messages) - len(shown)
        state_html = h(
            '<section id="state" aria-label="State at the checkpoint"><h2>State at checkpoint <code>{}</code></h2>'
            '<p>{} · step {} · {} messages{}</p>{}<h3>Other values</h3><pre class="json">{}</pre></section>',
            picked,
            state.get("created_at") or "",
            (state.get("metadata") or {}).get("step"),
            len(messages),
            f" (the last {len(shown)} shown)" if first else "",
            join(_state_message(m, first + i) for i, m in enumerate(shown)),
            json.dumps(values, indent=2, ensure_ascii=False, default=str),
        )
        body = h(
            '{}{}<h2>Checkpoints (newest first)</h2><ol class="timeline" aria-label="Checkpoints">{}</ol>{}',
            facts,
            _tabs(thread_id, "/ui/thread/timeline"),
            items,
            state_html,
        )
        return page(ctx, f"Thread {thread_id}: timeline", body, current="/ui/threads")

    return guarded(ctx, build)


@router.get("/thread/usage")
def thread_usage_page(request: Request) -> Response:
    ctx = context(request)
    thread_id = request.query_params.get("id", "")

    def build() -> Response:
        _, facts = _head(ctx, thread_id)
        turns = _data.turn_usage(ctx.services, ctx.tenant, thread_id)
        body = h(
            "{}{}<h2>Tokens and cost per turn</h2>{}",
            facts,
            _tabs(thread_id, "/ui/thread/usage"),
            turn_chart(turns),
        )
        return page(ctx, f"Thread {thread_id}: tokens", body, current="/ui/threads")

    return guarded(ctx, build)
