"""The hot endpoints (an add, a card, a search: ``_v1.HOT``) are answered by ``server/_lean.LeanRoutes``,
not by FastAPI's router and dependency solver, behind the same guard: these tests pin what makes that
path fast (no dependency solving, one trip to the pool, the answer written from the dataclasses) and that
it answers as FastAPI did, byte for byte (the same app built with no hot route is the reference), with the
same key, tenant, size and rate rules. Counts and bytes, never times."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
from starlette.testclient import TestClient

from remem.memory import Memory
from remem.server.keys import create_key
from remem.testing import offline_settings

pytest.importorskip("fastapi")

SETTINGS = offline_settings()
ADD = "/v1/threads/t1/messages"
MESSAGES = [
    {"id": "m1", "role": "user", "content": "the invoice for the garden"},
    {"id": "m2", "role": "assistant", "content": "noted: the garden invoice"},
]


@contextlib.contextmanager
def _app(db: str, *, lean: bool = True, **options: Any) -> Iterator[Any]:
    from remem.server import ServerOptions, _v1, create_app

    hot = _v1.HOT
    if not lean:  # the reference: every request through FastAPI's router, as before the lean path
        _v1.HOT = ()
    try:
        app = create_app(ServerOptions(db, **{"rate_limit": 0, **options}), settings=SETTINGS)
        with TestClient(app, base_url="http://127.0.0.1") as c:
            yield c
    finally:
        _v1.HOT = hot


def _keys(db: str) -> tuple[str, str, str]:
    with Memory.from_url(db, settings=SETTINGS) as memory:
        a, _ = create_key(memory.store, tenant="a")
        b, _ = create_key(memory.store, tenant="b")
        admin, _ = create_key(memory.store, admin=True)
    return a, b, admin


# every request a client could send a hot endpoint, valid or not (method, path, body, content type)
REQUESTS: list[tuple[str, str, Any, str | None]] = [
    ("POST", ADD, {"messages": MESSAGES, "user_id": "u1"}, "application/json"),
    ("POST", ADD, {"messages": MESSAGES}, "application/json"),  # a retry: stores nothing again
    ("POST", "/v1/threads/t1/card", {"max_recent_messages": 6, "query": "invoice"}, "application/json"),
    ("POST", "/v1/threads/t1/card", None, None),  # no body: the defaults
    ("POST", "/v1/threads/t1/card", b"null", "application/json"),
    ("POST", "/v1/search", {"query": "invoice", "thread_id": "t1", "k": 5}, "application/json"),
    ("POST", "/v1/search", {"query": "invoice", "thread_id": "t1"}, "application/json; charset=utf-8"),
    ("POST", "/v1/search", {"query": "garden", "thread_id": "t1"}, "application/vnd.remem+json"),
    ("POST", ADD, {"messages": [{"role": "user", "content": 3}]}, "application/json"),
    ("POST", ADD, {"messages": [{"role": "robot", "content": "hi"}]}, "application/json"),
    ("POST", ADD, {"messages": MESSAGES, "tenant": "b"}, "application/json"),  # unknown field
    ("POST", ADD, b'{"messages": [', "application/json"),  # not JSON
    ("POST", ADD, b"\xff\xfe", "application/json"),  # not text
    ("POST", ADD, b'{"messages": []}', "text/plain"),
    ("POST", ADD, b'{"messages": []}', None),  # no content type: not read as JSON (FastAPI's strict rule)
    ("POST", ADD, None, "application/json"),  # no body
    ("POST", ADD, b"[]", "application/json"),
    ("POST", "/v1/threads/" + "x" * 513 + "/messages", {"messages": MESSAGES}, "application/json"),
    ("POST", "/v1/threads/none/card", {}, "application/json"),  # no such thread: 404
    ("POST", "/v1/threads/t1/card", {"token_budget": 0}, "application/json"),
    ("POST", "/v1/search", {"k": 5}, "application/json"),
    ("GET", "/v1/search", None, None),  # not a hot method: FastAPI's 405
    ("POST", ADD + "/", {"messages": MESSAGES}, "application/json"),  # not a hot path: FastAPI's
]


def _send(c: TestClient, method: str, path: str, body: Any, kind: str | None, key: str) -> Any:
    headers = {"X-Api-Key": key}
    if kind:
        headers["Content-Type"] = kind
    content = body if isinstance(body, bytes) or body is None else pydantic_core.to_json(body)
    return c.request(method, path, content=content, headers=headers)


def _seen(answer: Any) -> tuple[int, bytes, str | None, str | None]:
    return (
        answer.status_code,
        answer.content,
        answer.headers.get("content-type"),
        answer.headers.get("allow"),
    )


def test_the_hot_endpoints_answer_as_fastapi_did_byte_for_byte(tmp_path: Path) -> None:
    answers: dict[bool, list[Any]] = {}
    for lean in (False, True):  # the same requests on the same state, one database each
        db = f"sqlite:///{tmp_path / f'lean-{lean}.db'}"
        with Memory.from_url(db, settings=SETTINGS) as memory:
            key, _ = create_key(memory.store, tenant="a", name="same")
        with _app(db, lean=lean) as c:
            answers[lean] = [_seen(_send(c, *request, key)) for request in REQUESTS]
    volatile = (b"created_at", b"updated_at", b"timestamp")  # the clock's: each database's own
    for request, before, after in zip(REQUESTS, answers[False], answers[True], strict=True):
        assert before[0] == after[0], request
        assert before[2:] == after[2:], request
        if not any(word in before[1] for word in volatile):
            assert before[1] == after[1], request
    statuses = [a[0] for a in answers[True]]
    assert statuses[:8] == [200] * 8
    assert statuses[8:] == [422] * 10 + [404, 422, 422, 405, 200]


def test_a_refusal_on_the_lean_path_names_its_field(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fields.db'}"
    key, _, _ = _keys(db)
    with _app(db) as c:
        bad = _send(c, "POST", ADD, {"messages": [{"role": "user", "content": 3}]}, "application/json", key)
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "messages.0.content"
        broken = _send(c, "POST", ADD, b'{"messages": [', "application/json", key)
        assert broken.json()["errors"][0]["field"] == "body (not valid JSON at character 14)"
        long_id = _send(c, "POST", "/v1/threads/" + "x" * 513 + "/card", {}, "application/json", key)
        assert long_id.status_code == 422 and long_id.json()["errors"][0]["field"] == "path.thread_id"


def test_a_hot_request_solves_no_dependency_and_goes_to_the_pool_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fastapi.routing

    from remem.server import _routes

    db = f"sqlite:///{tmp_path / 'counts.db'}"
    key, _, _ = _keys(db)
    solved: list[str] = []
    trips: list[str] = []
    solve, in_pool = fastapi.routing.solve_dependencies, _routes.in_pool

    async def counted_solve(**kwargs: Any) -> Any:
        solved.append(kwargs["request"].url.path)
        return await solve(**kwargs)

    async def counted_trip(call: Any) -> Any:
        trips.append(getattr(getattr(call, "func", call), "__name__", repr(call)))
        return await in_pool(call)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted_solve)
    monkeypatch.setattr(_routes, "in_pool", counted_trip)
    with _app(db) as c:
        for path, body in [
            (ADD, {"messages": MESSAGES, "user_id": "u1"}),
            ("/v1/threads/t1/card", {"max_recent_messages": 6, "query": "invoice"}),
            ("/v1/search", {"query": "invoice", "thread_id": "t1", "k": 5}),
        ]:
            before = len(trips)
            assert _send(c, "POST", path, body, "application/json", key).status_code == 200
            assert trips[before:] == ["answer"], path
        assert solved == []
        assert _send(c, "GET", "/v1/threads/t1", None, None, key).status_code == 200
        assert solved == ["/v1/threads/t1"]  # the counter counts: a route that is not hot solves


def test_the_card_is_written_as_as_json_would_write_it(tmp_path: Path) -> None:
    from remem.server._v1 import as_json

    db = f"sqlite:///{tmp_path / 'card.db'}"  # no keys: the server reads the database as the library
    with _app(db) as c:
        for n in range(4):
            batch = [
                {"id": f"u{n}", "role": "user", "content": f"the invoice {n} for the garden"},
                {"id": f"a{n}", "role": "assistant", "content": "noted", "metadata": {"n": n, "ok": [1.5]}},
            ]
            assert c.post(ADD, json={"messages": batch, "user_id": "u1"}).status_code == 200
        card = c.post("/v1/threads/t1/card", json={"max_recent_messages": 3, "query": "invoice"})
        found = c.post("/v1/search", json={"query": "invoice", "thread_id": "t1"})
    with Memory.from_url(db, settings=SETTINGS) as memory:
        thread = memory.get_thread("t1")
        expected = thread.get_context_card(max_recent_messages=3, query="invoice")
        records = memory.search("invoice", thread_id="t1")
    assert card.content == pydantic_core.to_json(as_json(expected), inf_nan_mode="null")
    assert expected.records and expected.recent
    assert found.content == pydantic_core.to_json({"results": as_json(records)}, inf_nan_mode="null")


def test_the_lean_path_keeps_keys_and_tenants(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tenants.db'}"
    a, b, admin = _keys(db)
    with _app(db) as c:
        assert _send(c, "POST", ADD, {"messages": MESSAGES}, "application/json", a).status_code == 200
        for path, body in [("/v1/threads/t1/card", {"query": "invoice"})]:
            other = _send(c, "POST", path, body, "application/json", b)
            assert other.status_code == 404 and other.json()["error"] == "NotFoundError"
        searched = _send(
            c, "POST", "/v1/search", {"query": "invoice", "thread_id": "t1"}, "application/json", b
        )
        assert searched.status_code == 200 and searched.json()["results"] == []
        mine = _send(c, "POST", "/v1/search", {"query": "invoice", "thread_id": "t1"}, "application/json", a)
        assert {r["id"] for r in mine.json()["results"]} >= {"m1"}
        # b's add makes b's own t1: a's thread keeps its two messages
        theirs = [{"id": "b1", "role": "user", "content": "b's words"}]
        assert _send(c, "POST", ADD, {"messages": theirs}, "application/json", b).status_code == 200
        listed = c.get("/v1/threads/t1/messages", headers={"X-Api-Key": a}).json()["messages"]
        assert [m["id"] for m in listed] == ["m1", "m2"]
        nobody = c.post(ADD, json={"messages": MESSAGES})
        assert nobody.status_code == 401 and "API key" in nobody.json()["detail"]
        wrong = c.post(ADD, json={"messages": MESSAGES}, headers={"X-Api-Key": "rmk_not_a_key"})
        assert wrong.status_code == 401
        admins = _send(c, "POST", "/v1/search", {"query": "x"}, "application/json", admin)
        assert admins.status_code == 403
        metrics = c.get("/metrics").text
    hot = 'route="/v1/threads/{thread_id}/messages"'
    assert f'remem_http_requests_total{{method="POST",{hot},status="200"}} 2.0' in metrics
    assert (
        'remem_http_requests_total{method="POST",route="/v1/threads/{thread_id}/card",status="404"}'
        in metrics
    )
    assert (
        'remem_http_errors_total{error="NotFoundError",route="/v1/threads/{thread_id}/card"} 1.0' in metrics
    )


def test_the_lean_path_keeps_the_size_cap_and_the_rate_limit(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'limits.db'}"
    key, _, _ = _keys(db)
    with _app(db, max_body=200, rate_limit=3) as c:
        big = [{"id": "m1", "role": "user", "content": "x" * 300}]
        too_large = _send(c, "POST", ADD, {"messages": big}, "application/json", key)
        assert too_large.status_code == 413 and too_large.json()["error"] == "PayloadTooLarge"
        answers = [
            _send(c, "POST", "/v1/search", {"query": "x", "thread_id": "t1"}, "application/json", key)
            for _ in range(4)
        ]
    # the 413 was refused before the limit (the body cap is outermost): the bucket of 3 serves 3
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    assert answers[-1].status_code == 429 and int(answers[-1].headers["retry-after"]) >= 1
    assert answers[-1].json()["error"] == "RateLimited"


def test_the_admin_rule_holds_under_a_root_path(tmp_path: Path) -> None:
    """The guard decides by the path the routes match: under a root path (a proxy's prefix) a tenant's
    key still cannot reach key management, and the hot endpoints still answer (before, the guard read
    the raw path, so ``/api/v1/keys`` was no admin path to it while the router served it as one)."""
    from remem.server import ServerOptions, create_app

    db = f"sqlite:///{tmp_path / 'root.db'}"
    a, _, admin = _keys(db)
    app = create_app(ServerOptions(db, rate_limit=0), settings=SETTINGS)
    with TestClient(app, base_url="http://127.0.0.1", root_path="/api") as c:
        made = c.post("/api/v1/keys", json={"admin": True}, headers={"X-Api-Key": a})
        assert made.status_code == 403 and "admin key" in made.json()["detail"]
        assert c.get("/api/v1/keys", headers={"X-Api-Key": a}).status_code == 403
        assert c.get("/api/v1/threads", headers={"X-Api-Key": admin}).status_code == 403
        assert c.get("/api/v1/keys", headers={"X-Api-Key": admin}).status_code == 200
        added = c.post("/api/" + ADD.lstrip("/"), json={"messages": MESSAGES}, headers={"X-Api-Key": a})
        assert added.status_code == 200, added.text
