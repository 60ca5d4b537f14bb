"""GET /v1/threads reads the threads' listings (``remem.layout.thread_listing``): a page costs the same
store round trips at 10 threads as at 200, in the same order (by thread id) and pages as before, in the
key's tenant only. Store reads are counted, never timed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import Op, Result

from remem import layout
from remem.memory import Memory
from remem.server._tenancy import TenantStore
from remem.server.keys import create_key
from remem.testing import offline_settings

SETTINGS = offline_settings()


def _write(db: str, threads: int) -> str:
    """``threads`` threads of tenant acme (t005 as written before listings existed), one of tenant other;
    acme's key."""
    with Memory.from_url(db, settings=SETTINGS) as memory:
        acme = Memory(TenantStore(memory.store, "acme"))
        for n in range(threads):
            acme.thread(f"t{n:03d}", user_id=f"u{n % 3}").add_messages(
                [{"id": f"m{n}", "role": "user", "content": "hi", "timestamp": f"2026-01-{1 + n % 28:02d}T00:00:00Z"}]
            )  # fmt: skip
        acme.store.delete(layout.thread_listing("t005"), layout.THREAD_META_KEY)  # as remem 0.1 left it
        Memory(TenantStore(memory.store, "other")).thread("t001x", user_id="o").add_messages(
            [{"role": "user", "content": "not acme's"}]
        )
        key, _ = create_key(memory.store, tenant="acme")
    return key


@contextlib.contextmanager
def _served(tmp_path: Path, threads: int) -> Iterator[Any]:
    """A client of a server holding ``threads`` threads of acme, with acme's key."""
    from starlette.testclient import TestClient

    from remem.server import ServerOptions, create_app

    db = f"sqlite:///{tmp_path / f'{threads}.db'}"
    key = _write(db, threads)
    app = create_app(ServerOptions(db), settings=SETTINGS)
    with TestClient(app, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {key}"}) as c:
        assert c.get("/v1/threads", params={"limit": 1}).status_code == 200  # the key is read and cached
        yield c


def _counted(c: Any, monkeypatch: pytest.MonkeyPatch, **params: int) -> tuple[int, int, list[Any]]:
    """The store batches and operations of one GET /v1/threads in acme's view, and the threads answered."""
    store = c.app.app.state.services.memory_for("acme").store  # (the app inside its body limit)
    sent = {"batches": 0, "ops": 0}
    batch = store.batch

    def counting(ops: Iterable[Op]) -> list[Result]:
        given = list(ops)
        sent["batches"] += 1
        sent["ops"] += len(given)
        return batch(given)

    with monkeypatch.context() as patched:
        patched.setattr(store, "batch", counting)
        answer = c.get("/v1/threads", params=params)
    assert answer.status_code == 200, answer.text
    return sent["batches"], sent["ops"], answer.json()["threads"]


def test_a_page_of_threads_costs_as_many_store_round_trips_at_200_threads_as_at_10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _served(tmp_path, 10) as c:
        few, few_ops, first = _counted(c, monkeypatch)
    with _served(tmp_path, 200) as c:
        many, many_ops, more = _counted(c, monkeypatch)
    assert [t["thread_id"] for t in first] == [f"t{n:03d}" for n in range(10)]
    assert [t["thread_id"] for t in more] == [f"t{n:03d}" for n in range(100)]  # the default page
    # the ids' listing, the listings' batch, and t005 read alone (its metadata and last message: 5);
    # before: 21 batches at 10 threads, 201 at 200 (a thread's metadata read twice, one by one)
    assert many == few <= 2 + 5
    assert few_ops <= 1 + 10 + 5 and many_ops <= 1 + 100 + 5  # a get per listing, all in one batch
    by_id = {t["thread_id"]: t for t in more}
    assert (by_id["t007"]["message_count"], by_id["t007"]["user_id"]) == (1, "u1")
    assert by_id["t007"]["last_activity"] == "2026-01-08T00:00:00Z"
    assert by_id["t005"]["last_activity"] == "2026-01-06T00:00:00Z"  # from its last message


def test_pages_keep_their_order_and_offsets_in_the_keys_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _served(tmp_path, 12) as c:
        pages = [_counted(c, monkeypatch, limit=5, offset=n)[2] for n in (0, 5, 10)]
    ids = [t["thread_id"] for page in pages for t in page]
    assert ids == [f"t{n:03d}" for n in range(12)]  # t001x is the other tenant's
    assert [len(page) for page in pages] == [5, 5, 2]
