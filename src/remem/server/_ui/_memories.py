"""The inspector's memory pages: hybrid search with each hit's scores, delete, forget a user."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from remem import layout
from remem.errors import NotFoundError, RememUsageError
from remem.memory import MemoryRecord
from remem.server._ui._base import Context, checked_form, context, csrf_field, guarded, page, whole
from remem.server._ui._html import Html, h, join, link, table, url
from remem.server._ui._memory import memory_link
from remem.server._ui._session import redirect

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)


def _score(signals: dict[str, float], name: str) -> str:
    value = signals.get(name)
    if value is None:
        return "–"
    return str(int(value)) if name.endswith("_rank") else f"{value:.4f}"


def _hits(ctx: Context, records: list[MemoryRecord], user: str) -> Html:
    rows = []
    for rank, r in enumerate(records, 1):
        source: Any = "–"
        if r.thread_id:
            source = link(
                f"{r.thread_id} #{r.seq}" if r.seq >= 0 else r.thread_id, "/ui/thread", {"id": r.thread_id}
            )
        elif r.source_message_ids:
            source = ", ".join(r.source_message_ids)
        action: Any = ""
        content: Any = h('<span class="text">{}</span>', r.content)
        if r.type not in ("message", "summary") and user:
            action = link("Delete…", "/ui/memories/delete", {"user": user, "id": r.id})
            content = memory_link(h('<span class="text">{}</span>', r.content), user, r.id)
        rows.append(
            (
                rank,
                r.type,
                content,
                f"{r.score:.4f}",
                _score(r.signals, "keyword"),
                _score(r.signals, "keyword_rank"),
                _score(r.signals, "vector"),
                _score(r.signals, "vector_rank"),
                r.status,
                source,
                action,
            )
        )
    return table(
        [
            "Rank",
            "Type",
            "Content",
            "Score",
            "Keyword",
            "Keyword rank",
            "Vector",
            "Vector rank",
            "Status",
            "Source",
            "",
        ],
        rows,
        caption=f"{len(records)} hits, best first (score: the fused hybrid value the order follows)",
        cls="hits",
    )


def _listing(ctx: Context, user: str, limit: int) -> list[MemoryRecord]:
    from remem.memory._records import record_from_memory

    store = ctx.services.store_for(ctx.tenant)
    items = store.search(layout.user_memories(user), limit=limit)
    return [record_from_memory(i.key, i.value, None) for i in items]


@router.get("/memories")
def memories_page(request: Request) -> Response:
    ctx = context(request)
    q = request.query_params
    user, thread, query = q.get("user", ""), q.get("thread", ""), q.get("q", "")
    k = whole(q.get("k"), 20, 1, 200)

    def build() -> Response:
        form = h(
            '<form class="filters" method="get" action="/ui/memories" role="search">'
            '<label>User<input name="user" value="{}"></label><label>Thread (its messages too)<input name="thread" value="{}"></label>'
            '<label>Search<input name="q" value="{}" type="search"></label><label>Hits<input name="k" type="number" min="1" max="200" value="{}"></label>'
            '<button type="submit">Search</button></form>',
            user,
            thread,
            query,
            k,
        )
        result: Html = Html("")
        if query and (user or thread):
            records = ctx.services.memory_for(ctx.tenant).search(
                query, user_id=user or None, thread_id=thread or None, k=k
            )
            result = (
                _hits(ctx, records, user) if records else h('<p class="empty">{}</p>', "Nothing matches.")
            )
        elif user:
            records = _listing(ctx, user, k)
            result = (
                h("<h2>Memories of {}</h2>{}", user, _hits(ctx, records, user))
                if records
                else h('<p class="empty">{}</p>', f"{user} has no long-term memories.")
            )
        else:
            result = h('<p class="empty">{}</p>', "Give a user (and a query) to see their memories.")
        forget = (
            h(
                '<p><a class="danger" href="{}">Forget user {}…</a></p>',
                url("/ui/forget", {"user": user}),
                user,
            )
            if user
            else Html("")
        )
        return page(ctx, "Memories", h("{}{}{}", form, result, forget), current="/ui/memories")

    return guarded(ctx, build)


@router.get("/memories/delete")
def delete_confirm(request: Request) -> Response:
    ctx = context(request)
    user, key = request.query_params.get("user", ""), request.query_params.get("id", "")

    def build() -> Response:
        from remem.memory._records import record_from_memory

        if not user or not key:
            raise RememUsageError("say which memory: /ui/memories/delete?user=USER&id=ID")
        item = ctx.services.store_for(ctx.tenant).get(layout.user_memories(user), key)
        if item is None:
            raise NotFoundError(f"user {user!r} has no memory {key!r}")
        record = record_from_memory(item.key, item.value, None)
        body = h(
            '<p>Delete this memory of <strong>{}</strong>? It cannot be undone.</p><pre class="text">{}</pre>'
            '<form method="post" action="/ui/memories/delete">{}<input type="hidden" name="user" value="{}">'
            '<input type="hidden" name="id" value="{}"><button type="submit" class="danger">Delete the memory</button> '
            '<a href="{}">Cancel</a></form>',
            user,
            record.content,
            csrf_field(ctx),
            user,
            key,
            url("/ui/memories", {"user": user}),
        )
        return page(ctx, "Delete a memory", body, current="/ui/memories")

    return guarded(ctx, build)


@router.post("/memories/delete")
async def delete_memory(request: Request) -> Response:
    ctx = context(request)
    form, refused = await checked_form(request, ctx)
    if refused is not None:
        return refused
    user, key = str(form.get("user", "")), str(form.get("id", ""))

    def delete() -> Response:
        ctx.services.memory_for(ctx.tenant).delete_memory(user, key)  # the memory client's checks
        return redirect(url("/ui/memories", {"user": user, "done": "deleted"}))

    return await run_in_threadpool(guarded, ctx, delete)


@router.get("/forget")
def forget_confirm(request: Request) -> Response:
    ctx = context(request)
    user = request.query_params.get("user", "")
    body = h(
        "<p>Erase everything remem holds about user <strong>{}</strong>: long-term memories, every thread of the "
        "user (messages, summaries, checkpoints) and their usage rows. It cannot be undone.</p>"
        '<form method="post" action="/ui/forget">{}<input type="hidden" name="user" value="{}">'
        '<button type="submit" class="danger">Forget {}</button> <a href="{}">Cancel</a></form>',
        user,
        csrf_field(ctx),
        user,
        user,
        url("/ui/memories", {"user": user}),
    )
    return page(ctx, "Forget a user", body, current="/ui/memories")


def _report(report: Any) -> Html:
    from remem.server._v1 import as_json

    data = as_json(report)
    rows = [(k, v) for k, v in data.items() if not isinstance(v, dict | list)]
    nested = [(k, v) for k, v in data.items() if isinstance(v, dict | list)]
    extra = join(h("<dt>{}</dt><dd><code>{}</code></dd>", k, v) for k, v in nested)
    return h('{}<dl class="facts">{}</dl>', table(["Field", "Value"], rows, caption="Erasure"), extra)


@router.post("/forget")
async def forget_user(request: Request) -> Response:
    ctx = context(request)
    form, refused = await checked_form(request, ctx)
    if refused is not None:
        return refused
    user = str(form.get("user", ""))

    def forget() -> Response:
        from remem.server._erasure import forget_scope

        if not user:
            raise RememUsageError("say which user to forget")
        reports = forget_scope(ctx.services, ctx.tenant, user_id=user)
        body = h(
            '<p class="flash" role="status">User <strong>{}</strong> was forgotten. The erasure report:</p>'
            '<section id="erasure-report">{}</section>',
            user,
            join(_report(r) for r in reports),
        )
        return page(ctx, "Erasure report", body, current="/ui/memories")

    return await run_in_threadpool(guarded, ctx, forget)
