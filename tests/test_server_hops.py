"""A request to remem's own endpoints makes one trip to a thread: the endpoint's, which also turns its
answer into JSON (server/_routes.JSONRoute), through the endpoints' own pool (``_routes.in_pool``). Before, FastAPI validated the answer against its return
annotation in a second trip and serialised it on the event loop. Trips are counted, never timed; the
answers and the OpenAPI document stay what they were."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from fastapi import Response

from remem.memory import Memory
from remem.server.keys import KeyCache, create_key
from remem.testing import offline_settings

SETTINGS = offline_settings()


@contextlib.contextmanager
def _served(tmp_path: Path) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from remem.server import ServerOptions, _app, create_app

    db = f"sqlite:///{tmp_path / 'hops.db'}"
    with Memory.from_url(db, settings=SETTINGS) as memory:
        key, _ = create_key(memory.store, tenant="acme")
    with pytest.MonkeyPatch.context() as patch:
        # The key is read once for the whole test: the cache reads it again each ttl (1 s), a trip of its
        # own that a loaded machine's gaps between requests would add to a request's count (seen in CI).
        patch.setattr(_app, "KeyCache", functools.partial(KeyCache, ttl=3600.0))
        app = create_app(ServerOptions(db, rate_limit=0), settings=SETTINGS)
        with TestClient(app, base_url="http://127.0.0.1", headers={"X-Api-Key": key}) as c:
            answer = c.put("/v1/threads/t1", json={"user_id": "u1"})  # the key read and cached
            assert answer.status_code == 200
            yield c


def _trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call into a thread pool from now on (anyio's, FastAPI's, and the endpoints' own:
    ``_routes.in_pool``), by the function sent."""
    from remem.server import _routes

    trips: list[str] = []
    run_sync, in_pool = anyio.to_thread.run_sync, _routes.in_pool

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(func, "__name__", repr(func)))
        return await run_sync(func, *args, **kwargs)

    async def counted_in_pool(call: Any) -> Any:
        trips.append(getattr(getattr(call, "func", call), "__name__", repr(call)))
        return await in_pool(call)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    monkeypatch.setattr(_routes, "in_pool", counted_in_pool)
    return trips


def test_an_add_a_card_and_a_search_each_go_to_the_thread_pool_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _served(tmp_path) as c:
        trips = _trips(monkeypatch)
        messages = [
            {"id": "m1", "role": "user", "content": "the invoice for the garden"},
            {"id": "m2", "role": "assistant", "content": "noted: the garden invoice"},
        ]
        calls = [
            ("post", "/v1/threads/t1/messages", {"messages": messages}),
            ("post", "/v1/threads/t1/card", {"max_recent_messages": 6, "query": "invoice"}),
            ("post", "/v1/search", {"query": "invoice", "thread_id": "t1", "k": 5}),
            ("get", "/v1/threads/t1/messages", None),
            ("get", "/v1/threads/t1", None),
        ]
        answers = []
        for method, path, body in calls:
            before = len(trips)
            answer = c.request(method, path, json=body)
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"] == "application/json"
            assert trips[before:] == ["answer"], path  # the endpoints' own pool's trip (_routes.in_pool)
            answers.append(answer.json())
        assert [m["id"] for m in answers[0]["messages"]] == ["m1", "m2"]
        assert "<recent_messages>" in answers[1]["content"] or answers[1]["content"]
        assert [r["id"] for r in answers[2]["results"]]
        assert answers[3]["total"] == 2 and answers[4]["thread_id"] == "t1"


def test_the_langgraph_sdk_routes_go_to_the_thread_pool_once_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _served(tmp_path) as c:
        trips = _trips(monkeypatch)
        calls = [
            ("post", "/threads", {"thread_id": "sdk1", "metadata": {"app": "a"}}, None, 200),
            ("get", "/threads/sdk1", None, None, 200),
            (
                "put",
                "/store/items",
                {"namespace": ["notes"], "key": "k1", "value": {"text": "hi"}},
                None,
                204,
            ),
            ("get", "/store/items", None, {"namespace": "notes", "key": "k1"}, 200),
            ("post", "/store/items/search", {"namespace_prefix": ["notes"]}, None, 200),
        ]
        for method, path, body, params, status in calls:
            before = len(trips)
            answer = c.request(method, path, json=body, params=params)
            assert answer.status_code == status, answer.text
            assert len(trips) - before == 1, (path, trips[before:])
        assert c.get("/threads/sdk1").json()["metadata"] == {"app": "a"}
        assert c.get("/store/items", params={"namespace": "notes", "key": "k1"}).json()["value"] == {
            "text": "hi"
        }


def test_a_refused_body_still_names_its_field_and_the_document_keeps_the_answers_shapes(
    tmp_path: Path,
) -> None:
    with _served(tmp_path) as c:
        refused = c.post("/v1/threads/t1/messages", json={"messages": [{"role": "user", "content": 3}]})
        assert refused.status_code == 422 and "messages.0.content" in refused.json()["detail"]
        document = c.get("/openapi.json").json()
    answer = document["paths"]["/v1/threads/{thread_id}/messages"]["post"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"]["type"] == "object"
    count = document["paths"]["/v1/count"]["post"]["responses"]["200"]["content"]["application/json"]
    assert count["schema"]["additionalProperties"] == {"type": "integer"}


def test_a_json_route_keeps_its_status_code_and_leaves_an_endpoint_that_sets_headers_to_fastapi() -> None:
    from fastapi import APIRouter, FastAPI
    from starlette.testclient import TestClient

    from remem.server._routes import JSONRoute

    router = APIRouter(route_class=JSONRoute)

    @router.post("/made", status_code=201)
    def made() -> dict[str, Any]:
        return {"made": True}

    @router.get("/paged")
    def paged(response: Response) -> list[int]:
        response.headers["X-Pagination-Total"] = "3"
        return [1, 2, 3]

    @router.get("/scored")
    def scored() -> dict[str, Any]:
        return {"score": float("nan"), "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "pair": (1, 2)}

    app = FastAPI()
    app.include_router(router)
    with TestClient(app) as c:
        # the bytes FastAPI's own serialiser writes: JSON's null for a NaN, never a bare NaN
        assert c.get("/scored").content == b'{"score":null,"at":"2026-01-01T00:00:00Z","pair":[1,2]}'

        created = c.post("/made")
        assert (created.status_code, created.json()) == (201, {"made": True})
        page = c.get("/paged")
        assert page.json() == [1, 2, 3] and page.headers["X-Pagination-Total"] == "3"
