"""One long-term memory in the inspector: its provenance (links to the source messages), the chain of
memories it superseded or was superseded by, and an edit form."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from remem import layout
from remem.errors import NotFoundError, RememUsageError
from remem.server._ui._base import Context, checked_form, context, csrf_field, guarded, page
from remem.server._ui._html import Html, h, join, link, url
from remem.server._ui._session import redirect
from remem.server._ui._threads import MESSAGES_PAGE

__all__ = ["memory_link", "router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
CHAIN_HOPS = 20


def memory_link(text: Any, user: str, memory_id: str) -> Html:
    return link(text, "/ui/memory", {"user": user, "id": memory_id})


def _value(ctx: Context, user: str, memory_id: str) -> dict[str, Any] | None:
    item = ctx.services.store_for(ctx.tenant).get(layout.user_memories(user), memory_id)
    return dict(item.value) if item is not None else None


def _ids(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def _chain(ctx: Context, user: str, memory_id: str, value: dict[str, Any]) -> Html:
    """The memories this one superseded (older), and the one that superseded it (newer), in order."""
    older: list[tuple[str, dict[str, Any] | None]] = []
    seen = {memory_id}
    todo = _ids(value.get("supersedes"))
    while todo and len(older) < CHAIN_HOPS:
        found = todo.pop(0)
        if found in seen:
            continue
        seen.add(found)
        was = _value(ctx, user, found)
        older.append((found, was))
        todo.extend(_ids((was or {}).get("supersedes")))
    newer: list[tuple[str, dict[str, Any] | None]] = []
    following = value.get("superseded_by")
    while isinstance(following, str) and following not in seen and len(newer) < CHAIN_HOPS:
        seen.add(following)
        was = _value(ctx, user, following)
        newer.append((following, was))
        following = (was or {}).get("superseded_by")

    def item(memory: str, found: dict[str, Any] | None, where: str) -> Html:
        if found is None:
            return h("<li>{} <code>{}</code>: no longer stored</li>", where, memory)
        return h(
            "<li>{} {} ({}): {}</li>",
            where,
            memory_link(memory, user, memory),
            found.get("status", "active"),
            found.get("content", ""),
        )

    rows = [item(m, v, "supersedes") for m, v in older] + [item(m, v, "superseded by") for m, v in newer]
    if not rows:
        return h('<p class="empty">{}</p>', "It supersedes no memory and none supersedes it.")
    return h('<ul class="chain">{}</ul>', join(rows))


def _sources(ctx: Context, value: dict[str, Any]) -> Html:
    thread_id = value.get("thread_id")
    ids = _ids(value.get("source_message_ids", value.get("sources")))
    if not ids:
        return h('<p class="empty">{}</p>', "No source messages recorded.")
    if not isinstance(thread_id, str):
        return h("<p>{}</p>", ", ".join(ids))
    store = ctx.services.store_for(ctx.tenant)
    items = []
    for message_id in ids:
        found = store.get(layout.thread_messages(thread_id), message_id)
        if found is None:
            items.append(h("<li><code>{}</code>: no longer in thread {}</li>", message_id, thread_id))
            continue
        seq = int(found.value.get("seq", 0))
        target = url("/ui/thread", {"id": thread_id, "page": seq // MESSAGES_PAGE + 1}) + f"#m{seq}"
        items.append(
            h(
                '<li><a href="{}">{} #{}</a> ({}): {}</li>',
                target,
                thread_id,
                seq,
                found.value.get("role", ""),
                found.value.get("content", ""),
            )
        )
    return h('<ul class="sources">{}</ul>', join(items))


@router.get("/memory")
def memory_page(request: Request) -> Response:
    ctx = context(request)
    user, memory_id = request.query_params.get("user", ""), request.query_params.get("id", "")

    def build() -> Response:
        if not user or not memory_id:
            raise RememUsageError("say which memory: /ui/memory?user=USER&id=ID")
        value = _value(ctx, user, memory_id)
        if value is None:
            raise NotFoundError(f"user {user!r} has no memory {memory_id!r}")
        content = value.get("content", value.get("text", ""))
        facts = join(
            h("<dt>{}</dt><dd>{}</dd>", name, value.get(name))
            for name in (
                "kind",
                "type",
                "status",
                "valid",
                "confidence",
                "origin",
                "extracted_at",
                "updated_at",
            )
            if value.get(name) is not None
        )
        body = h(
            '<dl class="facts"><dt>User</dt><dd>{}</dd>{}</dl><h2>Content</h2><pre class="text" id="memory-content">{}</pre>'
            "<h2>Where it came from</h2>{}<h2>Superseded chain</h2>{}<h2>Edit</h2>"
            '<form method="post" action="/ui/memory/edit">{}<input type="hidden" name="user" value="{}">'
            '<input type="hidden" name="id" value="{}"><label for="content">New content</label>'
            '<textarea id="content" name="content" rows="3" cols="60" required>{}</textarea> '
            '<button type="submit">Save</button></form><p>{}</p>',
            user,
            facts,
            content,
            _sources(ctx, value),
            _chain(ctx, user, memory_id, value),
            csrf_field(ctx),
            user,
            memory_id,
            content,
            link("Delete this memory…", "/ui/memories/delete", {"user": user, "id": memory_id}),
        )
        return page(ctx, f"Memory {memory_id}", body, current="/ui/memories")

    return guarded(ctx, build)


@router.post("/memory/edit")
async def edit_memory(request: Request) -> Response:
    ctx = context(request)
    form, refused = await checked_form(request, ctx)
    if refused is not None:
        return refused
    user, memory_id, content = (str(form.get(k, "")) for k in ("user", "id", "content"))

    def save() -> Response:
        ctx.services.memory_for(ctx.tenant).edit_memory(user, memory_id, content)
        return redirect(url("/ui/memory", {"user": user, "id": memory_id, "done": "edited"}))

    return await run_in_threadpool(guarded, ctx, save)
