"""remem's own endpoints, under ``/v1``: threads, messages, summaries, cards, search, forget, usage, keys.

Each one validates its input (unknown fields and wrong types are a 422 naming the field), takes the
tenant from the request's key (never from the body), calls the public API on the tenant's view and
returns what it returned, as JSON. A thread of another tenant is not found (404), as one that never was.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from remem.errors import InvalidMessagesError, RememUsageError
from remem.memory import DEFAULT_CARD_TOKEN_BUDGET, Memory, ThreadInfo
from remem.server._listings import listings_of, thread_id_page, unlisted_info
from remem.server._routes import JSONRoute
from remem.server._services import Principal, Services
from remem.server._tenancy import checkpoint_thread

__all__ = ["register"]

router = APIRouter(prefix="/v1", route_class=JSONRoute)  # one thread-pool hop a request
HOT = (
    ("POST", "/v1/threads/{thread_id}/messages"),
    ("POST", "/v1/threads/{thread_id}/card"),
    ("POST", "/v1/search"),
)
"""The routes an agent calls every turn, answered by :class:`~remem.server._lean.LeanRoutes`."""
MAX_PAGE = 1000
ROLE_NAMES = ("user", "assistant", "system", "tool", "human", "ai", "developer")
ThreadId = Annotated[str, Field(min_length=1, max_length=512)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class MessageIn(_Body):
    role: str = Field(max_length=32, description="user, assistant, system or tool (human, ai, developer too)")
    content: str
    id: str | None = Field(default=None, min_length=1, max_length=512)
    timestamp: str | None = Field(default=None, max_length=64)
    metadata: dict[str, Any] | None = None
    name: str | None = Field(default=None, max_length=256)
    speaker: str | None = Field(default=None, max_length=256)

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        # Checked here too (remem checks it again), so that a refused message creates no thread.
        if role.lower() not in ROLE_NAMES:
            raise InvalidMessagesError(f"role {role!r} is not one of {', '.join(ROLE_NAMES)}")
        return role


class AddMessages(_Body):
    messages: list[MessageIn] = Field(max_length=1000)
    user_id: str | None = Field(default=None, min_length=1, max_length=512)
    agent_id: str | None = Field(default=None, max_length=512)


class OpenThread(_Body):
    user_id: str | None = Field(default=None, min_length=1, max_length=512)
    agent_id: str | None = Field(default=None, max_length=512)
    context_summary_update_frequency: int | None = Field(default=None, ge=1, le=10_000)


class SummaryRequest(_Body):
    except_last: int = Field(default=0, ge=0)
    token_budget: int = Field(default=1000, ge=1, le=1_000_000)


class CardRequest(_Body):
    except_last_messages: int = Field(default=0, ge=0)
    max_recent_messages: int = Field(default=0, ge=0, le=10_000)
    max_relevant_results: int | None = Field(default=None, ge=0, le=1000)
    token_budget: int = Field(default=DEFAULT_CARD_TOKEN_BUDGET, ge=1, le=1_000_000)
    types: list[str] | None = Field(default=None, max_length=50)
    metadata_filter: dict[str, Any] | None = None
    query: str | None = Field(default=None, max_length=10_000)


class RecallRequest(_Body):
    query: str = Field(max_length=10_000)
    k: int = Field(default=3, ge=0, le=MAX_PAGE)
    exclude_ids: list[str] = Field(default_factory=list, max_length=10_000)
    types: list[str] | None = Field(default=None, max_length=50)
    token_budget: int = Field(default=400, ge=1, le=1_000_000)


class CountRequest(_Body):
    text: str


class SearchRequest(_Body):
    query: str = Field(max_length=10_000)
    user_id: str | None = Field(default=None, min_length=1, max_length=512)
    thread_id: str | None = Field(default=None, min_length=1, max_length=512)
    types: list[str] | None = Field(default=None, max_length=50)
    k: int = Field(default=10, ge=0, le=MAX_PAGE)


class ForgetRequest(_Body):
    user_id: str | None = Field(default=None, min_length=1, max_length=512)
    thread_id: str | None = Field(default=None, min_length=1, max_length=512)


class CreateKey(_Body):
    tenant: str | None = Field(default=None, max_length=64)
    admin: bool = False
    name: str = Field(default="", max_length=200)


class RotateKey(_Body):
    grace: float = Field(default=3600.0, ge=0, le=366 * 86400)


# ----------------------------------------------------------------------------- helpers


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _who(request: Request) -> Principal:
    principal: Principal = request.state.principal
    return principal


def _memory(request: Request) -> Memory:
    return _services(request).memory_for(_who(request).tenant)


_SCALARS = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass's field names, found once per class


def as_json(value: Any) -> Any:
    """A result of the public API as JSON (dataclasses as dicts, tuples as lists)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {str(k): as_json(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [as_json(v) for v in value]
    names = _FIELDS.get(kind)
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(value))
    if names is not None:
        return {name: as_json(getattr(value, name)) for name in names}
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value


def _message_dicts(messages: list[MessageIn]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_none=True) for m in messages]


def thread_infos(memory: Memory, limit: int, offset: int) -> list[ThreadInfo]:
    """The threads of the memory's store, by id, one page: its ids in one listing of namespaces, their
    listings in one batch (a thread written before listings were kept is read alone)."""
    ids = sorted(thread_id_page(memory, limit, offset))
    listed = listings_of(memory, ids)
    infos = (listed.get(thread_id) or unlisted_info(memory, thread_id) for thread_id in ids)
    return [info for info in infos if info is not None]


# ----------------------------------------------------------------------------- threads and messages


@router.get("/threads", tags=["threads"])
def list_threads(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """The tenant's threads (the memory client's), one page."""
    infos = thread_infos(_memory(request), limit, offset)
    return {"threads": as_json(infos), "limit": limit, "offset": offset}


@router.put("/threads/{thread_id}", tags=["threads"])
def open_thread(request: Request, thread_id: ThreadId, body: OpenThread | None = None) -> Any:
    """Create the thread or open it (a thread keeps the user it was created for)."""
    body = body or OpenThread()
    thread = _memory(request).thread(
        thread_id,
        user_id=body.user_id,
        agent_id=body.agent_id,
        context_summary_update_frequency=body.context_summary_update_frequency,
    )
    return as_json(thread.info())


@router.get("/threads/{thread_id}", tags=["threads"])
def get_thread(request: Request, thread_id: ThreadId) -> Any:
    """The thread's metadata; 404 when there is no such thread."""
    return as_json(_memory(request).get_thread(thread_id).info())


@router.post("/threads/{thread_id}/messages", tags=["threads"])
def add_messages(request: Request, thread_id: ThreadId, body: AddMessages) -> dict[str, Any]:
    """Append messages (the thread is created when new). A message whose id the thread holds is not
    stored again: a retry of the same request stores each message once."""
    stored = _memory(request)._open_and_add(
        thread_id, _message_dicts(body.messages), user_id=body.user_id, agent_id=body.agent_id
    )
    return {"messages": stored}  # dataclasses: JSONRoute writes them as as_json would, in Rust


@router.get("/threads/{thread_id}/messages", tags=["threads"])
def list_messages(
    request: Request,
    thread_id: ThreadId,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """The thread's messages in order, one page (``next_offset`` is None on the last)."""
    page, total = _memory(request).get_thread(thread_id).message_page(offset, limit)  # reads only the page
    following = offset + limit if offset + limit < total else None
    return {"messages": as_json(page), "total": total, "offset": offset, "next_offset": following}


@router.post("/threads/{thread_id}/summary", tags=["threads"])
def get_summary(request: Request, thread_id: ThreadId, body: SummaryRequest | None = None) -> Any:
    """The summary of every message but the last ``except_last`` (extended first when new messages wait)."""
    body = body or SummaryRequest()
    thread = _memory(request).get_thread(thread_id)
    return as_json(thread.get_summary(except_last=body.except_last, token_budget=body.token_budget))


@router.get("/threads/{thread_id}/summaries", tags=["threads"])
def list_summaries(request: Request, thread_id: ThreadId) -> dict[str, Any]:
    """Every summary revision kept, oldest first."""
    return {"summaries": as_json(_memory(request).get_thread(thread_id).summaries())}


@router.post("/threads/{thread_id}/card", tags=["threads"])
def context_card(request: Request, thread_id: ThreadId, body: CardRequest | None = None) -> Any:
    """The thread's context card (``content`` is the escaped XML to send as a user-role message)."""
    body = body or CardRequest()
    thread = _memory(request)._unread_thread(thread_id)  # the card reads the thread (404 when missing)
    return thread.get_context_card(**body.model_dump())  # as JSONRoute writes it: as_json's bytes


@router.post("/threads/{thread_id}/recall", tags=["threads"])
def recall(request: Request, thread_id: ThreadId, body: RecallRequest) -> Any:
    """The ``k`` records best matching ``query`` (the thread's messages, its user's memories), leaving out
    ``exclude_ids``, as an escaped ``<recalled_memory>`` block (``content``)."""
    thread = _memory(request).get_thread(thread_id)
    return as_json(thread.recall(**body.model_dump()))


@router.post("/count", tags=["threads"])
def count_text(request: Request, body: CountRequest) -> dict[str, int]:
    """The tokens of ``text`` sent as one message, by the server's counter."""
    return {"tokens": _memory(request).count_text(body.text)}


@router.get("/threads/{thread_id}/usage", tags=["usage"])
def thread_usage(request: Request, thread_id: ThreadId) -> dict[str, Any]:
    """What the thread's model calls used, in all and per turn, from the usage ledger."""
    services = _services(request)
    tenant = _who(request).tenant
    services.memory_for(tenant).get_thread(thread_id)  # 404 when it is not the tenant's
    meter = services.memory.meter
    if meter is None:  # pragma: no cover - from_url always meters
        return {"total": None, "turns": []}
    ledger = meter.ledger
    stored = checkpoint_thread(thread_id, tenant)
    total = ledger.totals(thread_id=stored)
    turns = ledger.totals(by="turn", thread_id=stored)
    return {
        "total": total[0].as_dict() if total else None,
        "turns": [{**t.as_dict(), "key": t.key[1] if isinstance(t.key, tuple) else t.key} for t in turns],
    }


@router.get("/threads/{thread_id}/export", tags=["threads"])
def export_thread(request: Request, thread_id: ThreadId) -> dict[str, Any]:
    """The thread's transcript: its metadata, every message in order and every summary revision."""
    thread = _memory(request).get_thread(thread_id)
    return {
        "thread": as_json(thread.info()),
        "messages": as_json(thread.messages()),
        "summaries": as_json(thread.summaries()),
    }


# ----------------------------------------------------------------------------- search and forget


@router.post("/search", tags=["search"])
def search(request: Request, body: SearchRequest) -> dict[str, Any]:
    """Hybrid search of a thread's messages and a user's long-term memories, best first."""
    records = _memory(request).search(
        body.query, user_id=body.user_id, thread_id=body.thread_id, types=body.types, k=body.k
    )
    return {"results": records}


@router.post("/forget", tags=["erasure"])
def forget(request: Request, body: ForgetRequest) -> dict[str, Any]:
    """Erase a user's or a thread's data, checkpoints and usage rows included; returns the reports."""
    from remem.server._erasure import forget_scope

    if (body.user_id is None) == (body.thread_id is None):
        raise RememUsageError("forget needs exactly one of user_id or thread_id")
    services = _services(request)
    reports = forget_scope(services, _who(request).tenant, user_id=body.user_id, thread_id=body.thread_id)
    return {"erasures": as_json(reports)}


# ----------------------------------------------------------------------------- keys (admin)


@router.get("/keys", tags=["keys"])
def list_keys_endpoint(request: Request, tenant: str | None = None) -> dict[str, Any]:
    """Every key (of ``tenant`` when given); never a key's secret."""
    from remem.server.keys import list_keys

    return {"keys": [k.as_dict() for k in list_keys(_services(request).store, tenant=tenant)]}


@router.post("/keys", tags=["keys"])
def create_key_endpoint(request: Request, body: CreateKey) -> dict[str, Any]:
    """A new key; its secret is in this answer only."""
    from remem.server.keys import create_key

    secret, info = create_key(_services(request).store, tenant=body.tenant, admin=body.admin, name=body.name)
    return {"key": secret, **info.as_dict()}


@router.post("/keys/{key_id}/revoke", tags=["keys"])
def revoke_key_endpoint(request: Request, key_id: str) -> dict[str, Any]:
    """Revoke a key at once."""
    from remem.server.keys import revoke_key

    return revoke_key(_services(request).store, key_id).as_dict()


@router.post("/keys/{key_id}/rotate", tags=["keys"])
def rotate_key_endpoint(request: Request, key_id: str, body: RotateKey | None = None) -> dict[str, Any]:
    """A new key for the same tenant; the old one keeps working ``grace`` seconds."""
    from remem.server.keys import rotate_key

    body = body or RotateKey()
    secret, info = rotate_key(_services(request).store, key_id, grace=body.grace)
    return {"key": secret, **info.as_dict()}


def register(app: FastAPI) -> None:
    app.include_router(router)
