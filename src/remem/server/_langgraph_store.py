"""The store routes ``langgraph-sdk``'s client calls (``langgraph_sdk/_sync/store.py``), on the tenant's store.

Labels under remem's own roots (``_remem``, ``tenants``) are refused (422), and never listed. See
:mod:`remem.server._langgraph` for the thread routes and what is not served.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from remem.errors import NamespaceError, NotFoundError
from remem.server._langgraph import RESERVED_ROOTS, to_json
from remem.server._routes import JSONRoute
from remem.server._services import Principal, Services

__all__ = ["register"]

router = APIRouter(tags=["langgraph-sdk"], route_class=JSONRoute)  # one thread-pool hop a request


class PutItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: list[str]
    key: str = Field(min_length=1)
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = Field(default=None, ge=0)


class DeleteItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: list[str]
    key: str = Field(min_length=1)


class SearchItems(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace_prefix: list[str] = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=0, le=10_000)
    offset: int = Field(default=0, ge=0)
    query: str | None = Field(default=None, max_length=10_000)
    refresh_ttl: bool | None = None


class ListNamespaces(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(default=None, ge=1)
    limit: int = Field(default=100, ge=0, le=10_000)
    offset: int = Field(default=0, ge=0)


def _store(request: Request) -> Any:
    principal: Principal = request.state.principal
    services: Services = request.app.state.services
    return services.store_for(principal.tenant)


def _own(namespace: list[str] | tuple[str, ...], field: str) -> tuple[str, ...]:
    ns = tuple(namespace)
    if ns and ns[0] in RESERVED_ROOTS:
        raise NamespaceError(f"{field}: the root label {ns[0]!r} is remem's own; use another first label")
    return ns


def _item(item: Any) -> dict[str, Any]:
    found = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": to_json(item.value),
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
    }
    if hasattr(item, "score"):
        found["score"] = item.score
    return found


@router.put("/store/items", status_code=204)
def put_item(request: Request, body: PutItem) -> Response:
    kwargs: dict[str, Any] = {"index": body.index}
    if body.ttl is not None:  # minutes, as LangGraph's stores take it; left out: the store's default
        kwargs["ttl"] = body.ttl
    _store(request).put(_own(body.namespace, "namespace"), body.key, body.value, **kwargs)
    return Response(status_code=204)


@router.get("/store/items")
def get_item(
    request: Request,
    key: Annotated[str, Query(min_length=1)],
    namespace: str = "",
    refresh_ttl: bool | None = None,
) -> Any:
    ns = _own(tuple(namespace.split(".")) if namespace else (), "namespace")
    item = _store(request).get(ns, key, refresh_ttl=refresh_ttl)
    if item is None:
        raise NotFoundError(f"there is no item {key!r} in {namespace!r}")
    return _item(item)


@router.delete("/store/items", status_code=204)
def delete_item(request: Request, body: DeleteItem) -> Response:
    _store(request).delete(_own(body.namespace, "namespace"), body.key)
    return Response(status_code=204)


@router.post("/store/items/search")
def search_items(request: Request, body: SearchItems) -> dict[str, Any]:
    prefix = _own(body.namespace_prefix, "namespace_prefix")
    hits = _store(request).search(
        prefix,
        query=body.query,
        filter=body.filter,
        limit=body.limit,
        offset=body.offset,
        refresh_ttl=body.refresh_ttl,
    )
    return {"items": [_item(h) for h in hits if not (h.namespace and h.namespace[0] in RESERVED_ROOTS)]}


@router.post("/store/namespaces")
def list_namespaces(request: Request, body: ListNamespaces) -> dict[str, Any]:
    prefix = _own(body.prefix, "prefix") if body.prefix else None
    found = _store(request).list_namespaces(
        prefix=prefix,
        suffix=tuple(body.suffix) if body.suffix else None,
        max_depth=body.max_depth,
        limit=body.limit,
        offset=body.offset,
    )
    return {"namespaces": [list(ns) for ns in found if not (ns and ns[0] in RESERVED_ROOTS)]}


async def _invalid_namespace(request: Request, exc: Exception) -> JSONResponse:
    """LangGraph's own label check (``BaseStore.put``/``search``/...) refused a namespace: a 422."""
    return JSONResponse({"detail": f"namespace: {exc}", "error": "NamespaceError"}, status_code=422)


def register(app: FastAPI) -> None:
    from langgraph.store.base import InvalidNamespaceError

    app.include_router(router)
    app.add_exception_handler(InvalidNamespaceError, _invalid_namespace)
