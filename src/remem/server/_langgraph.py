"""The routes ``langgraph-sdk``'s client calls for threads and the store, answered from remem's savers and store.

Written from the client's source (``langgraph_sdk/_sync/threads.py``, ``store.py``, ``schema.py``): the
paths, the bodies it sends and the shapes it reads (``Thread``, ``ThreadState``, ``Item``...). No code of
LangGraph's licensed server is used.

- A thread is a record in the tenant's bookkeeping namespace (``("_remem", "sdk_threads")`` in the
  tenant's slot: its metadata and times) and its checkpoints, kept by remem's checkpointer under the
  tenant's checkpoint id (:func:`remem.server._tenancy.checkpoint_thread`). A thread that only has
  checkpoints (an app wrote them with the library) is listed and read too.
- State is read from the latest checkpoint (or the one asked for). The server holds no graph, so
  ``next`` and ``tasks`` are empty, and ``update_state`` writes a checkpoint itself: ``messages`` are
  appended with LangGraph's ``add_messages`` reducer (a message with a known id replaces it), every other key
  is replaced. A graph with other reducers should update its state through the graph (``RemoteGraph``
  runs are not served).
- The store routes run on the tenant's store (:mod:`remem.server._langgraph_store`); labels under remem's
  own roots (``_remem``, ``tenants``) are refused (422).
- Runs, crons and assistants are LangGraph Platform's: they answer 501 naming what to use instead.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from remem import layout
from remem.errors import NotFoundError, RememUsageError
from remem.server._routes import JSONRoute
from remem.server._services import Principal, Services
from remem.server._tenancy import checkpoint_thread, tenant_thread

__all__ = ["register"]

router = APIRouter(tags=["langgraph-sdk"], route_class=JSONRoute)  # one thread-pool hop a request
SDK_THREADS = layout.namespace(layout.INTERNAL_ROOT, "sdk_threads")
RESERVED_ROOTS = frozenset({layout.INTERNAL_ROOT, layout.TENANTS_ROOT})
_MAX_THREADS = 100_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # the SDK grows fields; unknown ones are left alone


class CheckpointRef(_Body):
    thread_id: str | None = None
    checkpoint_ns: str = ""
    checkpoint_id: str | None = None
    checkpoint_map: dict[str, Any] | None = None


class ThreadCreate(_Body):
    thread_id: str | None = Field(default=None, min_length=1, max_length=512)
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    supersteps: list[dict[str, Any]] | None = None
    ttl: dict[str, Any] | None = None


class ThreadPatch(_Body):
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl: dict[str, Any] | None = None


class ThreadSearch(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[str] | None = None
    status: str | None = None
    limit: int = Field(default=10, ge=0, le=10_000)
    offset: int = Field(default=0, ge=0)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class ThreadCount(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: str | None = None


class Prune(_Body):
    thread_ids: list[str] = Field(max_length=10_000)
    strategy: Literal["delete", "keep_latest"] = "delete"


class StateAt(_Body):
    checkpoint: CheckpointRef
    subgraphs: bool = False


class StateUpdate(_Body):
    values: dict[str, Any] | list[dict[str, Any]] | None = None
    as_node: str | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: str | None = None


class History(_Body):
    limit: int = Field(default=10, ge=1, le=10_000)
    before: str | CheckpointRef | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: CheckpointRef | None = None


# ----------------------------------------------------------------------------- JSON


def to_json(value: Any) -> Any:
    """A checkpoint's values as JSON: LangChain messages as their dicts (as LangGraph's server sends them)."""
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_json(dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


# ----------------------------------------------------------------------------- threads


class _Threads:
    """The SDK's threads of one tenant."""

    def __init__(self, services: Services, tenant: str | None) -> None:
        self.services = services
        self.tenant = tenant
        self.store = services.store_for(tenant)
        self.saver = services.saver

    def config(self, thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
        configurable: dict[str, Any] = {
            "thread_id": checkpoint_thread(thread_id, self.tenant),
            "checkpoint_ns": ns,
        }
        if checkpoint_id:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    def record(self, thread_id: str) -> dict[str, Any] | None:
        item = self.store.get(SDK_THREADS, thread_id)
        return dict(item.value) if item is not None else None

    def latest(self, thread_id: str) -> Any:
        return self.saver.get_tuple(self.config(thread_id))

    def thread(self, thread_id: str, record: dict[str, Any] | None = None) -> dict[str, Any] | None:
        record = record if record is not None else self.record(thread_id)
        latest = self.latest(thread_id)
        if record is None and latest is None:
            return None
        stamp = latest.checkpoint["ts"] if latest is not None else None
        created = (record or {}).get("created_at") or stamp or _now()
        return {
            "thread_id": thread_id,
            "created_at": created,
            "updated_at": max(str((record or {}).get("updated_at") or created), str(stamp or "")),
            "metadata": (record or {}).get("metadata") or {},
            "status": "idle",
            "values": self.values(latest),
            "interrupts": {},
        }

    def values(self, tup: Any) -> Any:
        if tup is None:
            return {}
        channels = tup.checkpoint.get("channel_values", {})
        return to_json({k: v for k, v in channels.items() if not k.startswith(("__", "branch:"))})

    def get(self, thread_id: str) -> dict[str, Any]:
        found = self.thread(thread_id)
        if found is None:
            raise NotFoundError(f"there is no thread {thread_id!r}")
        return found

    def save(self, thread_id: str, record: dict[str, Any]) -> None:
        self.store.put(SDK_THREADS, thread_id, record, index=False)

    def ids(self) -> list[str]:
        from remem.checkpoint import list_threads

        ids = {item.key for item in self.store.search(SDK_THREADS, limit=_MAX_THREADS)}
        for stored in list_threads(self.saver):
            own = tenant_thread(stored, self.tenant)
            if own is not None and (
                self.tenant is not None or not stored.startswith(f"{layout.TENANTS_ROOT}:")
            ):
                ids.add(own)
        return sorted(ids)

    def state(self, thread_id: str, tup: Any) -> dict[str, Any]:
        if tup is None:
            return {
                "values": {},
                "next": [],
                "checkpoint": {
                    "thread_id": thread_id,
                    "checkpoint_ns": "",
                    "checkpoint_id": None,
                    "checkpoint_map": None,
                },
                "metadata": {},
                "created_at": None,
                "parent_checkpoint": None,
                "tasks": [],
                "interrupts": [],
            }
        return {
            "values": self.values(tup),
            "next": [],
            "checkpoint": self.ref(thread_id, tup.config),
            "metadata": self.metadata(tup.metadata),
            "created_at": tup.checkpoint.get("ts"),
            "parent_checkpoint": self.ref(thread_id, tup.parent_config) if tup.parent_config else None,
            "tasks": [],
            "interrupts": [],
        }

    def ref(self, thread_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
        c = config.get("configurable", {})
        return {
            "thread_id": thread_id,
            "checkpoint_ns": c.get("checkpoint_ns", ""),
            "checkpoint_id": c.get("checkpoint_id"),
            "checkpoint_map": c.get("checkpoint_map"),
        }

    def metadata(self, metadata: Mapping[str, Any]) -> Any:
        own = dict(metadata or {})
        if "thread_id" in own and isinstance(own["thread_id"], str):
            own["thread_id"] = tenant_thread(own["thread_id"], self.tenant) or own["thread_id"]
        return to_json(own)

    def update(self, thread_id: str, body: StateUpdate) -> dict[str, Any]:
        from langchain_core.messages import convert_to_messages
        from langgraph.checkpoint.base import copy_checkpoint, create_checkpoint, empty_checkpoint
        from langgraph.graph.message import add_messages

        if body.values is not None and not isinstance(body.values, dict):
            raise RememUsageError("values: give a dict of state keys (a list of updates needs the graph)")
        checkpoint_id = body.checkpoint_id or (body.checkpoint.checkpoint_id if body.checkpoint else None)
        base = self.saver.get_tuple(self.config(thread_id, checkpoint_id))
        if checkpoint_id and base is None:
            raise NotFoundError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        previous = copy_checkpoint(base.checkpoint) if base is not None else empty_checkpoint()
        step = int(base.metadata.get("step", -1)) + 1 if base is not None else -1
        new = create_checkpoint(previous, None, step)
        values = dict(new["channel_values"])
        changed = dict(body.values or {})
        versions: dict[str, Any] = {}
        for key, value in changed.items():
            if key == "messages":
                given: Any = convert_to_messages(value if isinstance(value, list) else [value])
                value = add_messages(values.get("messages", []), given)
            values[key] = value
            versions[key] = self.saver.get_next_version(new["channel_versions"].get(key), None)
        new["channel_values"] = values
        new["channel_versions"] = {**new["channel_versions"], **versions}
        parent = base.config if base is not None else self.config(thread_id)
        metadata = {
            "source": "update",
            "step": step,
            "parents": {},
            "writes": {body.as_node or "__remem__": to_json(changed)},
        }
        saved = self.saver.put(parent, new, metadata, versions)
        record = self.record(thread_id) or {"created_at": _now(), "metadata": {}}
        self.save(thread_id, {**record, "updated_at": _now()})
        return {"checkpoint": self.ref(thread_id, saved)}


def _threads(request: Request) -> _Threads:
    principal: Principal = request.state.principal
    services: Services = request.app.state.services
    return _Threads(services, principal.tenant)


def _matches(wanted: Mapping[str, Any] | None, found: Mapping[str, Any]) -> bool:
    return all(found.get(k) == v for k, v in (wanted or {}).items())


@router.post("/threads")
def create_thread(request: Request, body: ThreadCreate) -> Any:
    threads = _threads(request)
    thread_id = body.thread_id or str(uuid.uuid4())
    existing = threads.thread(thread_id)
    if existing is not None:
        if body.if_exists == "do_nothing":
            return existing
        return JSONResponse(
            {"detail": f"thread {thread_id!r} already exists (create with if_exists='do_nothing' to get it)"},
            status_code=409,
        )
    now = _now()
    threads.save(thread_id, {"created_at": now, "updated_at": now, "metadata": body.metadata or {}})
    for superstep in body.supersteps or ():
        for update in superstep.get("updates", ()):
            threads.update(thread_id, StateUpdate(values=update.get("values"), as_node=update.get("as_node")))
    return threads.get(thread_id)


@router.get("/threads/{thread_id}")
def get_thread(request: Request, thread_id: str) -> Any:
    return _threads(request).get(thread_id)


@router.patch("/threads/{thread_id}")
def patch_thread(request: Request, thread_id: str, body: ThreadPatch) -> Any:
    threads = _threads(request)
    current = threads.get(thread_id)
    record = threads.record(thread_id) or {"created_at": current["created_at"], "metadata": {}}
    record = {**record, "metadata": {**(record.get("metadata") or {}), **body.metadata}, "updated_at": _now()}
    threads.save(thread_id, record)
    if request.headers.get("prefer") == "return=minimal":
        return Response(status_code=204)
    return threads.get(thread_id)


@router.delete("/threads/{thread_id}", status_code=204)
def delete_thread(request: Request, thread_id: str) -> Response:
    threads = _threads(request)
    threads.get(thread_id)
    threads.saver.delete_thread(checkpoint_thread(thread_id, threads.tenant))
    threads.store.delete(SDK_THREADS, thread_id)
    return Response(status_code=204)


def _search(threads: _Threads, metadata: Any, values: Any, ids: Any, status: Any) -> list[dict[str, Any]]:
    found = []
    for thread_id in ids if ids else threads.ids():
        thread = threads.thread(thread_id)
        if thread is None or (status and thread["status"] != status):
            continue
        if _matches(metadata, thread["metadata"]) and _matches(values, thread["values"]):
            found.append(thread)
    return found


@router.post("/threads/search")
def search_threads(request: Request, body: ThreadSearch, response: Response) -> Any:
    found = _search(_threads(request), body.metadata, body.values, body.ids, body.status)
    key = body.sort_by or "created_at"
    found.sort(key=lambda t: str(t.get(key, "")), reverse=(body.sort_order or "desc") == "desc")
    page = found[body.offset : body.offset + body.limit]
    response.headers["X-Pagination-Total"] = str(len(found))
    if body.offset + body.limit < len(found):
        response.headers["X-Pagination-Next"] = str(body.offset + body.limit)
    if body.select:
        page = [{k: v for k, v in t.items() if k in body.select} for t in page]
    return page


@router.post("/threads/count")
def count_threads(request: Request, body: ThreadCount) -> int:
    return len(_search(_threads(request), body.metadata, body.values, None, body.status))


@router.post("/threads/{thread_id}/copy")
def copy_thread(request: Request, thread_id: str) -> Any:
    threads = _threads(request)
    source = threads.get(thread_id)
    target = str(uuid.uuid4())
    threads.saver.copy_thread(
        checkpoint_thread(thread_id, threads.tenant), checkpoint_thread(target, threads.tenant)
    )
    now = _now()
    threads.save(target, {"created_at": now, "updated_at": now, "metadata": source["metadata"]})
    return threads.get(target)


@router.post("/threads/prune")
def prune_threads(request: Request, body: Prune) -> dict[str, Any]:
    threads = _threads(request)
    mine = [t for t in body.thread_ids if threads.thread(t) is not None]
    stored = [checkpoint_thread(t, threads.tenant) for t in mine]
    if body.strategy == "delete":
        for thread_id, checkpoint_id in zip(mine, stored, strict=True):
            threads.saver.delete_thread(checkpoint_id)
            threads.store.delete(SDK_THREADS, thread_id)
    elif stored:
        threads.saver.prune(stored, strategy="keep_latest")
    return {"pruned_count": len(mine)}


@router.get("/threads/{thread_id}/state")
def get_state(request: Request, thread_id: str) -> Any:
    threads = _threads(request)
    threads.get(thread_id)
    return threads.state(thread_id, threads.latest(thread_id))


@router.post("/threads/{thread_id}/state/checkpoint")
def state_at_checkpoint(request: Request, thread_id: str, body: StateAt) -> Any:
    return _state_at(request, thread_id, body.checkpoint.checkpoint_id, body.checkpoint.checkpoint_ns)


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
def state_at(request: Request, thread_id: str, checkpoint_id: str) -> Any:
    return _state_at(request, thread_id, checkpoint_id, "")


def _state_at(request: Request, thread_id: str, checkpoint_id: str | None, ns: str) -> Any:
    threads = _threads(request)
    threads.get(thread_id)
    tup = threads.saver.get_tuple(threads.config(thread_id, checkpoint_id, ns))
    if tup is None:
        raise NotFoundError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
    return threads.state(thread_id, tup)


@router.post("/threads/{thread_id}/state")
def update_state(request: Request, thread_id: str, body: StateUpdate) -> Any:
    threads = _threads(request)
    threads.get(thread_id)
    return threads.update(thread_id, body)


@router.post("/threads/{thread_id}/history")
def history(request: Request, thread_id: str, body: History) -> Any:
    threads = _threads(request)
    threads.get(thread_id)
    ns = body.checkpoint.checkpoint_ns if body.checkpoint else ""
    config = threads.config(thread_id, body.checkpoint.checkpoint_id if body.checkpoint else None, ns)
    before = None
    if body.before is not None:
        before_id = body.before if isinstance(body.before, str) else body.before.checkpoint_id
        before = threads.config(thread_id, before_id, ns)
    found = threads.saver.list(config, filter=body.metadata or None, before=before, limit=body.limit)
    return [threads.state(thread_id, tup) for tup in found]


# ----------------------------------------------------------------------------- outside remem's scope

_NOT_SERVED = {
    "runs": "runs execute a graph on LangGraph Platform; run your graph in your app with remem's checkpointer "
    "(checkpointer_from_url) and read its threads here",
    "assistants": "assistants are LangGraph Platform's deployed graphs; compile your graph in your app",
    "crons": "scheduled runs are LangGraph Platform's; schedule your app's own runs",
}


def _not_served(kind: str) -> JSONResponse:
    return JSONResponse(
        {"detail": f"remem serve does not serve {kind}: {_NOT_SERVED[kind]}", "error": "NotImplemented"},
        status_code=501,
    )


def _add_not_served(app: FastAPI) -> None:
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    for kind in _NOT_SERVED:
        path = f"/{kind}"

        def answer(kind: str = kind) -> JSONResponse:
            return _not_served(kind)

        app.add_api_route(path, answer, methods=methods, include_in_schema=False)
        app.add_api_route(path + "/{rest:path}", answer, methods=methods, include_in_schema=False)

    def thread_runs() -> JSONResponse:
        return _not_served("runs")

    app.add_api_route("/threads/{thread_id}/runs", thread_runs, methods=methods, include_in_schema=False)
    app.add_api_route(
        "/threads/{thread_id}/runs/{rest:path}", thread_runs, methods=methods, include_in_schema=False
    )
    app.add_api_route("/threads/{thread_id}/stream", thread_runs, methods=methods, include_in_schema=False)


def register(app: FastAPI) -> None:
    """The thread routes, and the answers for what is not served (the store's are :mod:`._langgraph_store`)."""
    app.include_router(router)
    _add_not_served(app)
