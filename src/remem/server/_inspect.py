"""What the CLI's reading commands read from a server (``--db http://...``), under ``/v1``: the usage
ledger (``remem usage``, ``remem export``), a thread's checkpoints (``remem state``, ``remem history``,
``remem export``) and the checkpoint database (``remem checkpoints stats|prune``).

Each answer is the tenant's part only: thread and user ids go in tenant-qualified
(:func:`~remem.server._tenancy.checkpoint_thread`) and come back as the tenant's own, a thread of another
tenant is not found (404), and the ledger and checkpoint listings hold the tenant's rows only.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from remem.errors import NotFoundError, RememUsageError
from remem.server._services import Principal, Services
from remem.server._tenancy import checkpoint_thread, tenant_thread
from remem.server._v1 import MAX_PAGE, ThreadId, as_json

__all__ = ["register"]

router = APIRouter(prefix="/v1")
UsageBy = Literal["turn", "thread", "model", "day", "user", "kind"]
IdParam = Annotated[str | None, Query(min_length=1, max_length=512)]


def _context(request: Request) -> tuple[Services, str | None]:
    services: Services = request.app.state.services
    principal: Principal = request.state.principal
    return services, principal.tenant


def _ledger(services: Services) -> Any:
    meter = services.memory.meter
    return None if meter is None else meter.ledger


def _prefix(tenant: str | None) -> str | None:
    return None if tenant is None else checkpoint_thread("", tenant)


def _own(value: Any, tenant: str | None) -> Any:
    """A tenant-qualified id back as the tenant's own (left as it is without a tenant)."""
    return tenant_thread(value, tenant) if isinstance(value, str) else value


def _filters(
    tenant: str | None, thread_id: str | None, user_id: str | None, since: float | None
) -> dict[str, Any]:
    return {
        "thread_id": None if thread_id is None else checkpoint_thread(thread_id, tenant),
        "user_id": None if user_id is None else checkpoint_thread(user_id, tenant),
        "since": since,
        "id_prefix": _prefix(tenant),
    }


# ----------------------------------------------------------------------------- the usage ledger


@router.get("/usage/events", tags=["usage"])
def usage_events(
    request: Request,
    thread_id: IdParam = None,
    user_id: IdParam = None,
    since: Annotated[float | None, Query(ge=0)] = None,
    limit: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    """The tenant's recorded model calls, oldest first (at most ``limit``); ``since`` is an epoch time."""
    services, tenant = _context(request)
    ledger = _ledger(services)
    if ledger is None:  # pragma: no cover - from_url always meters
        return {"events": []}
    events = ledger.events(**_filters(tenant, thread_id, user_id, since), limit=limit)
    found = []
    for event in events:
        data = as_json(event)
        data["thread_id"], data["user_id"] = _own(event.thread_id, tenant), _own(event.user_id, tenant)
        found.append(data)
    return {"events": found}


@router.get("/usage/totals", tags=["usage"])
def usage_totals(
    request: Request,
    by: UsageBy | None = None,
    thread_id: IdParam = None,
    user_id: IdParam = None,
    since: Annotated[float | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    """The tenant's model calls summed, grouped ``by`` turn, thread, model, day, user or kind."""
    services, tenant = _context(request)
    ledger = _ledger(services)
    if ledger is None:  # pragma: no cover - from_url always meters
        return {"totals": []}
    found = []
    for totals in ledger.totals(by=by, **_filters(tenant, thread_id, user_id, since)):
        data = as_json(totals)
        if by == "turn":
            data["key"] = [_own(totals.key[0], tenant), totals.key[1]]
        elif by in ("thread", "user"):
            data["key"] = _own(totals.key, tenant)
        found.append(data)
    return {"totals": found}


# ----------------------------------------------------------------------------- a thread's checkpoints


def _no_checkpoint(thread_id: str, checkpoint_id: str | None) -> NotFoundError:
    # Named by the tenant's own id: the checkpointer's (tenant-qualified) id is the server's business.
    what = f"checkpoint {checkpoint_id} of thread" if checkpoint_id else "thread"
    return NotFoundError(f"{what} {thread_id!r} has no checkpoints; `remem threads` lists the threads")


@router.get("/threads/{thread_id}/checkpoint", tags=["checkpoints"])
def checkpoint_state(
    request: Request,
    thread_id: ThreadId,
    checkpoint_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> dict[str, Any]:
    """The thread's latest checkpointed state, or its state at ``checkpoint_id``: messages (LangChain's
    dict form), summary, next nodes, the model calls' usage and the turn number the state records."""
    from langchain_core.messages import messages_to_dict

    from remem.inspection import reader_graph, thread_snapshot

    services, tenant = _context(request)
    stored = checkpoint_thread(thread_id, tenant)
    try:
        snapshot = thread_snapshot(reader_graph(services.saver), stored, checkpoint_id)
    except NotFoundError:
        raise _no_checkpoint(thread_id, checkpoint_id) from None
    config: Any = {"configurable": {"thread_id": stored, "checkpoint_ns": ""}}
    if checkpoint_id:
        config["configurable"]["checkpoint_id"] = checkpoint_id
    found = services.saver.get_tuple(config)
    turn = None if found is None else (found.checkpoint.get("channel_values") or {}).get("remem_turn")
    return {
        "thread_id": thread_id,
        "checkpoint_id": snapshot.checkpoint_id,
        "created_at": snapshot.created_at,
        "messages": messages_to_dict(snapshot.messages),
        "summary": snapshot.summary,
        "next": list(snapshot.next),
        "usage": [dict(u) for u in snapshot.usage],
        "turn": turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
    }


@router.get("/threads/{thread_id}/checkpoints", tags=["checkpoints"])
def checkpoint_history(
    request: Request, thread_id: ThreadId, limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50
) -> dict[str, Any]:
    """The thread's checkpoints, newest first: step, message count, next nodes, source."""
    from remem.inspection import reader_graph, thread_history

    services, tenant = _context(request)
    try:
        rows = thread_history(reader_graph(services.saver), checkpoint_thread(thread_id, tenant), limit)
    except NotFoundError:
        raise _no_checkpoint(thread_id, None) from None
    return {"checkpoints": [dataclasses.asdict(r) for r in rows]}


# ----------------------------------------------------------------------------- the checkpoint database


def _own_threads(services: Services, tenant: str | None) -> dict[str, str]:
    """The tenant's checkpointed threads, newest first: the tenant's id -> the checkpointer's."""
    found = {}
    for stored in services.saver.list_threads():
        own = tenant_thread(stored, tenant)
        if own is not None:
            found[own] = stored
    return found


@router.get("/checkpoints", tags=["checkpoints"])
def checkpoint_stats(request: Request) -> dict[str, Any]:
    """The tenant's threads in the checkpointer, newest first: checkpoints, writes, stored values, bytes.
    ``storage_bytes`` is the whole database's without a tenant, and the sum of the tenant's threads with
    one (the file is shared)."""
    services, tenant = _context(request)
    stats = services.saver.stats()
    threads = []
    for t in stats.threads:
        own = tenant_thread(t.thread_id, tenant)
        if own is not None:
            threads.append(
                {**as_json(dataclasses.replace(t, thread_id=own)), "updated_at": t.updated_at.isoformat()}
            )
    storage = stats.storage_bytes if tenant is None else sum(t["bytes"] for t in threads)
    return {"threads": threads, "storage_bytes": storage}


class PruneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    thread_ids: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(
        default_factory=list, max_length=10_000
    )
    all: bool = False
    older_than_seconds: float | None = Field(default=None, ge=0, le=100 * 366 * 86400)
    strategy: Literal["keep_latest", "delete"] = "keep_latest"


@router.post("/checkpoints/prune", tags=["checkpoints"])
def prune_checkpoints(request: Request, body: PruneRequest) -> dict[str, Any]:
    """Drop old checkpoints (keep_latest) or whole threads (delete) of the tenant's threads named (or all
    of them); returns how many were deleted and of how many threads."""
    services, tenant = _context(request)
    if bool(body.thread_ids) == body.all:
        raise RememUsageError("prune needs thread_ids or all=true (one of them)")
    known = _own_threads(services, tenant)
    missing = [t for t in body.thread_ids if t not in known]
    if missing:
        raise NotFoundError(f"no thread {', '.join(repr(t) for t in missing)} in the checkpoints")
    targets = list(body.thread_ids) or list(known)
    age = None if body.older_than_seconds is None else timedelta(seconds=body.older_than_seconds)
    stored = [known[t] for t in targets]
    count = services.saver.prune_threads(stored, strategy=body.strategy, older_than=age) if stored else 0
    return {"deleted": count, "threads": targets}


def register(app: FastAPI) -> None:
    app.include_router(router)
