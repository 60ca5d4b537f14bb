"""``remem worker`` (run background jobs) and ``remem queue status | drain | retry | park``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from remem.cli._options import db_option, json_option

if TYPE_CHECKING:
    from remem.jobs import BuiltinHandlers, JobQueue

__all__ = ["COMMANDS", "queue_group", "worker_command"]


def _url(given: str | None) -> str:
    from remem.cli._options import database_url
    from remem.cli._sources import require_persistent

    return require_persistent(database_url(given))


_concurrency = click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="How many jobs run at once (worker threads in this process).",
)
_lease = click.option(
    "--lease",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="How long a job stays claimed without a heartbeat before another worker may take it.",
)


def _reload(handlers: BuiltinHandlers) -> None:
    handlers.reload()
    click.echo("SIGHUP: the configuration is read again at the next job", err=True)


def _run(database_url: str | None, concurrency: int, lease: float, *, until_empty: bool) -> int:
    from remem.jobs import BuiltinHandlers, run_workers

    handlers = BuiltinHandlers(_url(database_url))
    with _open_for_writing(database_url) as queue:
        try:
            return run_workers(
                queue,
                handlers.as_mapping(),
                concurrency=concurrency,
                until_empty=until_empty,
                handle_signals=True,
                on_hangup=lambda: _reload(handlers),
                lease=lease,
            )
        finally:
            handlers.close()


@click.command("worker")
@db_option
@_concurrency
@_lease
@click.option("--until-empty", is_flag=True, help="Stop once no job is ready (as `remem queue drain`).")
def worker_command(database_url: str | None, concurrency: int, lease: float, until_empty: bool) -> None:
    """Run queued background jobs (memory extraction, summary refresh) until stopped (SIGTERM, Ctrl-C).

    Start as many workers as you like, on any machine that reaches the database: each job runs once, a
    worker that dies leaves its job to the others once its lease expires. A stopped worker finishes its
    current job first. SIGHUP reads the configuration again (a rotated model key in remem.toml) from the
    next job on, with no restart.

    Example: remem worker --db sqlite:///.remem/remem.db --concurrency 2
    """
    from remem.cli._render import say

    ran = _run(database_url, concurrency, lease, until_empty=until_empty)
    say(f"worker stopped after {ran} job(s)")


@click.group("queue")
def queue_group() -> None:
    """Inspect and operate the background job queue (see RUNBOOK.md)."""


def _open_for_writing(database_url: str | None) -> JobQueue:
    """The queue of an existing database (its table set up: a writing command may create it)."""
    from remem.cli._sources import inspect_database
    from remem.jobs import open_queue

    db = inspect_database(_url(database_url), for_writing=True)  # a missing file is an error
    return open_queue(db.url)


@queue_group.command("status")
@db_option
@json_option
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Parked jobs shown.")
def status_command(database_url: str | None, as_json: bool, limit: int) -> None:
    """Show how many jobs are queued, running, done and parked per kind, and the parked jobs' errors.

    Exits 1 when a job is parked (it needs a look: `remem queue retry ID` once its cause is fixed).

    Example: remem queue status --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import emit_json, preview, say, show_table
    from remem.cli._sources import inspect_database
    from remem.jobs import open_queue_read_only

    db = inspect_database(_url(database_url))
    queue = open_queue_read_only(db.url)
    if queue is None:
        if as_json:
            emit_json({"database": db.shown, "counts": {}, "parked": []})
        else:
            say(f"no job queued yet in {db.shown}")
        return
    with queue:
        status = queue.status()
        parked = queue.jobs(status="parked", limit=limit) if limit else []
    if as_json:
        emit_json({"database": db.shown, **status.as_dict(), "parked": [j.as_dict() for j in parked]})
    else:
        rows = [
            (kind, *(by.get(s, 0) for s in ("queued", "running", "done", "parked")))
            for kind, by in sorted(status.counts.items())
        ]
        show_table(f"job queue in {db.shown}", ["kind", "queued", "running", "done", "parked"], rows)
        if status.oldest_queued_age is not None:
            say(f"oldest queued job waits for {status.oldest_queued_age:.0f} s")
        if parked:
            show_table(
                "parked jobs",
                ["id", "kind", "attempts", "thread", "error"],
                [(j.id, j.kind, j.attempts, j.thread_id or "", preview(j.last_error or "")) for j in parked],
            )
    if status.total("parked"):
        raise SystemExit(1)


@queue_group.command("drain")
@db_option
@_concurrency
@_lease
def drain_command(database_url: str | None, concurrency: int, lease: float) -> None:
    """Run every ready job now, then stop (before an upgrade or a shutdown; jobs waiting out a backoff stay).

    Exits 1 when jobs are left queued or parked after the run.

    Example: remem queue drain --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import say
    from remem.jobs import open_queue

    started = time.monotonic()
    ran = _run(database_url, concurrency, lease, until_empty=True)
    with open_queue(_url(database_url)) as queue:
        status = queue.status()
    left = {s: status.total(s) for s in ("queued", "running", "parked")}
    say(
        f"drained: {ran} job(s) ran in {time.monotonic() - started:.1f} s; left: "
        + ", ".join(f"{n} {s}" for s, n in left.items())
    )
    if any(left.values()):
        raise SystemExit(1)


@queue_group.command("retry")
@click.argument("job_id", required=False, metavar="[ID]")
@click.option("--all", "every", is_flag=True, help="Retry every parked job.")
@db_option
def retry_command(job_id: str | None, every: bool, database_url: str | None) -> None:
    """Queue a parked job again now, with its attempts reset (or every parked job with --all).

    Example: remem queue retry job-3f2a... --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import say
    from remem.errors import NotFoundError, RememUsageError

    if (job_id is None) == (not every):
        raise RememUsageError("give a job id or --all (`remem queue status` lists the parked jobs)")
    with _open_for_writing(database_url) as queue:
        count = queue.retry(job_id)
    if job_id is not None and not count:
        raise NotFoundError(f"no parked job {job_id!r}; `remem queue status` lists the parked jobs")
    say(f"queued again: {count} job(s)")


@queue_group.command("park")
@click.argument("job_id", required=False, metavar="[ID]")
@click.option("--kind", metavar="KIND", help="Park every queued job of this kind (say, extraction).")
@click.option("--reason", default="parked by hand", show_default=True, help="Kept as the job's error.")
@db_option
def park_command(job_id: str | None, kind: str | None, reason: str, database_url: str | None) -> None:
    """Park a queued job (or every queued job of a kind) so that no worker runs it until `remem queue retry`.

    Example: remem queue park --kind extraction --reason "model endpoint down" --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import say
    from remem.errors import NotFoundError, RememUsageError

    if (job_id is None) == (kind is None):
        raise RememUsageError("give a job id or --kind KIND (`remem queue status` lists the kinds)")
    with _open_for_writing(database_url) as queue:
        count = queue.park(job_id, reason) if job_id is not None else queue.park_kind(str(kind), reason)
    if job_id is not None and not count:
        raise NotFoundError(
            f"no queued job {job_id!r} (a running job is parked by stopping its worker, then parking it)"
        )
    say(f"parked: {count} job(s)")


@queue_group.command("reindex")
@click.option("--thread", "threads", multiple=True, required=True, metavar="THREAD_ID",
              help="A thread whose messages are embedded and indexed again (repeatable).")  # fmt: skip
@db_option
def reindex_command(threads: tuple[str, ...], database_url: str | None) -> None:
    """Queue the re-indexing of threads: a worker embeds and indexes the messages that have no vector yet
    (turns stored unindexed). Run `remem worker` or drain. To switch embedders, `remem store reembed`.

    Example: remem queue reindex --thread support-42 --db sqlite:///.remem/remem.db && remem queue drain
    """
    from remem.cli._render import say
    from remem.jobs import enqueue_reindex

    with _open_for_writing(database_url) as queue:
        ids = [enqueue_reindex(queue, thread) for thread in threads]
    say(f"queued: {len(ids)} reindex job(s)")


COMMANDS: list[click.Command] = [worker_command, queue_group]
