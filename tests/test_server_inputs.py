"""Hostile input on every route of the app (in process, through Starlette's TestClient): never a 5xx.

Labels that LangGraph refuses, NUL, lone percent escapes, paths, markup, emoji and over-long texts in every
path parameter, body field and filter key; bodies of the wrong JSON type. A 4xx is the right answer; the
stored strings themselves are tested in tests/test_server.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from remem.server import ServerOptions, create_app

HOSTILE = [
    "%00",
    "a.b",
    " ",
    "../..",
    "x" * 600,
    "tenants:a:b",
    "<script>alert(1)</script>",
    "😀",
    "[red]x[/red]",
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: Any) -> Iterator[TestClient]:
    folder: Path = tmp_path_factory.mktemp("inputs")
    app = create_app(ServerOptions(url=f"sqlite:///{folder / 'inputs.db'}"))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REMEM_EMBEDDER", "fake")
        yield mp


def _requests(h: str) -> list[tuple[str, str, dict[str, Any]]]:
    some = h or None
    return [
        ("PUT", f"/v1/threads/{h}", {"json": {"user_id": some}}),
        (
            "POST",
            f"/v1/threads/{h}/messages",
            {
                "json": {
                    "messages": [{"role": "user", "content": h, "id": some, "metadata": {h: h}}],
                    "user_id": some,
                }
            },
        ),
        ("GET", f"/v1/threads/{h}/messages", {"params": {"limit": h}}),
        ("POST", f"/v1/threads/{h}/card", {"json": {"query": h, "types": [h], "metadata_filter": {h: h}}}),
        ("POST", f"/v1/threads/{h}/summary", {"json": {"except_last": h}}),
        ("GET", f"/v1/threads/{h}/export", {}),
        ("GET", f"/v1/threads/{h}/usage", {}),
        ("POST", "/v1/search", {"json": {"query": h, "user_id": some, "thread_id": some, "types": [h]}}),
        ("POST", "/v1/forget", {"json": {"thread_id": some}}),
        ("POST", "/v1/keys", {"json": {"tenant": h, "name": h}}),
        ("POST", f"/v1/keys/{h}/rotate", {"json": {"grace": h}}),
        ("POST", "/threads", {"json": {"thread_id": some, "metadata": {h: h}, "if_exists": h}}),
        ("GET", f"/threads/{h}", {}),
        ("PATCH", f"/threads/{h}", {"json": {"metadata": {h: h}}}),
        ("GET", f"/threads/{h}/state", {}),
        ("POST", f"/threads/{h}/state", {"json": {"values": {h or "k": h}, "as_node": h}}),
        ("POST", f"/threads/{h}/history", {"json": {"before": h, "metadata": {h: h}, "limit": h}}),
        ("GET", f"/threads/{h}/state/{h}", {}),
        ("POST", f"/threads/{h}/state/checkpoint", {"json": {"checkpoint": {"checkpoint_id": h}}}),
        (
            "POST",
            "/threads/search",
            {"json": {"metadata": {h: h}, "values": {h: h}, "ids": [h], "sort_by": h}},
        ),
        ("POST", "/threads/prune", {"json": {"thread_ids": [h]}}),
        ("PUT", "/store/items", {"json": {"namespace": [h], "key": h or "k", "value": {h: h}, "index": [h]}}),
        ("GET", "/store/items", {"params": {"namespace": h, "key": h or "k"}}),
        ("POST", "/store/items/search", {"json": {"namespace_prefix": [h], "filter": {h: h}, "query": h}}),
        ("POST", "/store/namespaces", {"json": {"prefix": [h], "suffix": [h], "max_depth": h}}),
    ]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_no_route_answers_hostile_input_with_a_5xx(client: TestClient, hostile: str) -> None:
    failed = []
    for method, path, kwargs in _requests(hostile):
        answer = client.request(method, path, **kwargs)
        if answer.status_code >= 500:
            failed.append((method, path[:60], answer.status_code, answer.text[:120]))
    assert failed == []


@pytest.mark.parametrize("body", [b"[]", b"1", b'"x"', b"{"])
def test_bodies_of_the_wrong_json_type_are_4xx(client: TestClient, body: bytes) -> None:
    for path in (
        "/v1/threads/t/messages",
        "/v1/search",
        "/threads",
        "/threads/t/state",
        "/store/items/search",
    ):
        answer = client.post(path, content=body, headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500, (path, answer.status_code, answer.text[:120])


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/threads/t/messages", b"null"),
        ("/v1/threads/t/messages", b'{"messages": [null]}'),
        ("/v1/threads/t/messages", b'{"messages": [{"role": "user", "content": "x", "metadata": 5}]}'),
        ("/threads/t/state", b'{"values": 5}'),
        ("/store/items/search", b'{"namespace_prefix": "docs"}'),
    ],
)
def test_fields_of_the_wrong_type_are_4xx(client: TestClient, path: str, body: bytes) -> None:
    answer = client.post(path, content=body, headers={"content-type": "application/json"})
    assert 400 <= answer.status_code < 500, answer.text[:120]
