"""The inspector's usage page (the ledger per day, model and thread; budgets), the job queue and the
ingestions (each undone from here, as ``remem ingest undo --id`` does)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from remem.errors import NotFoundError
from remem.server._ui import _data
from remem.server._ui._base import Context, checked_form, context, csrf_field, guarded, page
from remem.server._ui._html import Html, h, join, link, money, number, table
from remem.server._ui._session import redirect
from remem.usage import Totals

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)


def _spend_rows(spend: dict[str, Totals], linked: bool = False) -> list[tuple[Any, ...]]:
    return [
        (
            link(name, "/ui/thread", {"id": name}) if linked else name,
            number(s.calls),
            number(s.input_tokens),
            number(s.cached_tokens),
            number(s.output_tokens),
            money(s.priced_cost),
        )
        for name, s in spend.items()
    ]


HEADERS = ["Calls", "Input tokens", "Cached", "Output tokens", "Cost"]


@router.get("/usage")
def usage_page(request: Request) -> Response:
    ctx = context(request)

    def build() -> Response:
        found = _data.usage_overview(ctx.services, ctx.tenant)
        budgets = join(
            h(
                '<tr><td>{}</td><td>{}</td><td>{}</td><td><meter min="0" max="{}" low="{}" high="{}" value="{}">{}</meter> {}%</td></tr>',
                b["scope"],
                b["name"],
                f"{number(b['used'], 4 if b['unit'] == 'cost' else 0)} of {b['limit']} {b['unit']}",
                b["limit"],
                b["limit"] * 0.6,
                b["limit"] * 0.85,
                min(b["used"], b["limit"]),
                f"{b['used']}",
                round(100 * b["used"] / b["limit"]) if b["limit"] else 0,
            )
            for b in found["budgets"]
        )
        limits = join(
            h("<dt>{}</dt><dd>{}</dd>", name.replace("_", " "), "no limit" if value is None else value)
            for name, value in found["limits"].items()
        )
        budget_html = (
            h(
                '<div class="scroll"><table><caption>How close each scope is to its limit</caption><thead><tr>'
                '<th scope="col">Scope</th><th scope="col">Which</th><th scope="col">Used</th><th scope="col">Share</th>'
                "</tr></thead><tbody>{}</tbody></table></div>",
                budgets,
            )
            if found["budgets"]
            else h('<p class="empty">{}</p>', "No thread or daily user budget is set.")
        )
        empty = h('<p class="empty">{}</p>', "No model calls recorded.")
        body = h(
            "<h2>Per day (UTC)</h2>{}<h2>Per model</h2>{}<h2>Per thread</h2>{}<h2>Budgets</h2>"
            '<dl class="facts">{}</dl>{}',
            table(["Day", *HEADERS], _spend_rows(found["day"]), caption="Spend per day")
            if found["day"]
            else empty,
            table(["Model", *HEADERS], _spend_rows(found["model"]), caption="Spend per model")
            if found["model"]
            else empty,
            table(["Thread", *HEADERS], _spend_rows(found["thread"], True), caption="Spend per thread")
            if found["thread"]
            else empty,
            limits,
            budget_html,
        )
        return page(ctx, "Usage", body, current="/ui/usage")

    return guarded(ctx, build)


def _when(epoch: float | None) -> str:
    return "–" if epoch is None else dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _action(ctx: Context, job: Any) -> Html:
    if job.status == "parked":
        verb, label = "retry", "Retry"
    elif job.status == "queued":
        verb, label = "park", "Park"
    else:
        return Html("")
    return h(
        '<form method="post" action="/ui/jobs/{}">{}<input type="hidden" name="id" value="{}">'
        '<button type="submit">{}</button></form>',
        verb,
        csrf_field(ctx),
        job.id,
        label,
    )


@router.get("/jobs")
def jobs_page(request: Request) -> Response:
    ctx = context(request)

    def build() -> Response:
        jobs = _data.jobs_of(ctx.services, ctx.tenant)
        counts: dict[str, int] = {}
        for job in jobs:
            counts[job.status] = counts.get(job.status, 0) + 1
        summary = h(
            '<dl class="facts"><dt>Queued</dt><dd>{}</dd><dt>Running</dt><dd>{}</dd><dt>Parked</dt><dd>{}</dd></dl>',
            counts.get("queued", 0),
            counts.get("running", 0),
            counts.get("parked", 0),
        )
        rows = [
            (
                h("<code>{}</code>", job.id),
                job.kind,
                job.status,
                f"{job.attempts} of {job.max_attempts}",
                job.thread_id or job.user_id or "–",
                _when(job.updated_at),
                h('<span class="text">{}</span>', job.last_error or ""),
                _action(ctx, job),
            )
            for job in jobs
        ]
        listing = (
            table(
                ["Job", "Kind", "Status", "Attempts", "For", "Updated", "Last error", ""],
                rows,
                caption="Jobs not done",
            )
            if rows
            else h('<p class="empty">{}</p>', "No job is queued, running or parked.")
        )
        return page(ctx, "Jobs", h("{}{}", summary, listing), current="/ui/jobs")

    return guarded(ctx, build)


async def _job_action(request: Request, verb: str) -> Response:
    ctx = context(request)
    form, refused = await checked_form(request, ctx)
    if refused is not None:
        return refused
    job_id = str(form.get("id", ""))

    def act() -> Response:
        from remem.jobs import open_queue

        queue = open_queue(ctx.services.url)
        try:
            job = queue.get(job_id)
            if not _data.owns_job(job, ctx.tenant):
                raise NotFoundError(f"there is no job {job_id!r}")
            if verb == "retry":
                queue.retry(job_id)
            else:
                queue.park(job_id, "parked from the inspector")
        finally:
            queue.close()
        return redirect(f"/ui/jobs?done={'retried' if verb == 'retry' else 'parked'}")

    return await run_in_threadpool(guarded, ctx, act)


@router.post("/jobs/retry")
async def retry_job(request: Request) -> Response:
    return await _job_action(request, "retry")


@router.post("/jobs/park")
async def park_job(request: Request) -> Response:
    return await _job_action(request, "park")


# ----------------------------------------------------------------------------- ingestions


def _undo_button(ctx: Context, entry: Any) -> Html:
    if entry.state == "undone":
        return Html("")
    return h(
        '<form method="post" action="/ui/ingestions/undo">{}<input type="hidden" name="id" value="{}">'
        '<button type="submit" class="danger">Undo</button></form>',
        csrf_field(ctx),
        entry.id,
    )


@router.get("/ingestions")
def ingestions_page(request: Request) -> Response:
    ctx = context(request)

    def build() -> Response:
        from remem.ingestion import list_ingestions

        entries = list(reversed(list_ingestions(ctx.services.memory_for(ctx.tenant))))  # newest first
        rows = [
            (
                h("<code>{}</code>", e.id),
                e.kind,
                h('<span class="text">{}</span>', e.source),
                e.state,
                e.started_at,
                number(len(e.threads)),
                number(e.added.get("messages", 0)),
                number(e.added.get("memories", 0)),
                _undo_button(ctx, e),
            )
            for e in entries
        ]
        body = (
            table(
                ["Ingestion", "Kind", "Source", "State", "Started", "Threads", "Messages", "Memories", ""],
                rows,
                caption="Write batches from outside a turn (imports, bulk loads), newest first",
            )
            if rows
            else h('<p class="empty">{}</p>', "No ingestion is recorded.")
        )
        return page(ctx, "Ingestions", body, current="/ui/ingestions")

    return guarded(ctx, build)


@router.post("/ingestions/undo")
async def undo_an_ingestion(request: Request) -> Response:
    ctx = context(request)
    form, refused = await checked_form(request, ctx)
    if refused is not None:
        return refused
    ingestion_id = str(form.get("id", ""))

    def undo() -> Response:
        from remem.ingestion import undo_ingestion

        undo_ingestion(ctx.services.memory_for(ctx.tenant), ingestion_id)  # another tenant's id: not found
        return redirect("/ui/ingestions?done=undone")

    return await run_in_threadpool(guarded, ctx, undo)
