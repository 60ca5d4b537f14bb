"""``remem serve --workers 2`` on the machine's PostgreSQL: both workers append to one thread at once, and
tenants stay apart. One server for the module."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import httpx
import pytest

from remem.server.keys import create_key
from remem.store import open_store
from tests.conftest import POSTGRES_URL, _fresh_database
from tests.server_process import Server, running_server

pytest.importorskip("fastapi")
pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Server, str, str]]:
    for url in _fresh_database(POSTGRES_URL):
        with open_store(url) as store:
            a, _ = create_key(store, tenant="a")
            b, _ = create_key(store, tenant="b")
        with running_server(url, ["--workers", "2", "--rate-limit", "0"]) as server:
            yield server, a, b


def test_two_workers_appending_to_one_thread_all_land_uniquely_numbered(
    served: tuple[Server, str, str],
) -> None:
    server, a, _ = served

    def append(worker: int) -> list[int]:
        seqs = []
        with httpx.Client(base_url=server.url, headers={"X-Api-Key": a}, timeout=60) as c:
            for n in range(6):
                body = {
                    "messages": [{"id": f"w{worker}-{n}", "role": "user", "content": f"m {n} of {worker}"}]
                }
                answer = c.post("/v1/threads/busy/messages", json=body)
                assert answer.status_code == 200, answer.text
                seqs.extend(m["seq"] for m in answer.json()["messages"])
                # a retry of the same request adds nothing
                assert c.post("/v1/threads/busy/messages", json=body).json()["messages"][0]["seq"] == seqs[-1]
        return seqs

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        seqs = [s for found in pool.map(append, range(4)) for s in found]
    assert sorted(seqs) == list(range(24))
    with httpx.Client(base_url=server.url, headers={"X-Api-Key": a}, timeout=60) as c:
        stored = c.get("/v1/threads/busy/messages").json()
    assert stored["total"] == 24 and [m["seq"] for m in stored["messages"]] == list(range(24))
    assert server.process.poll() is None


def test_tenants_stay_apart_on_postgres(served: tuple[Server, str, str]) -> None:
    server, a, b = served
    ca = httpx.Client(base_url=server.url, headers={"X-Api-Key": a}, timeout=60)
    cb = httpx.Client(base_url=server.url, headers={"X-Api-Key": b}, timeout=60)
    body = {"messages": [{"id": "p1", "role": "user", "content": "postgres secret"}], "user_id": "pat"}
    assert ca.post("/v1/threads/pg/messages", json=body).status_code == 200
    assert cb.get("/v1/threads/pg").status_code == 404
    assert cb.post("/v1/search", json={"query": "postgres secret", "user_id": "pat"}).json()["results"] == []
    assert ca.get("/readyz").json() == {"status": "ready"}
