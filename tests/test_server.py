"""``remem serve`` on a SQLite file, started for real (uvicorn in a child process), driven with httpx.

Two servers per module, started together: ``main`` (keys for tenants a and b and an admin, a 64 KiB body
cap) and ``limited`` (3 requests a minute per key). Keys are created in the database before the servers
start, as ``remem keys create`` does.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from remem.server.keys import create_key
from remem.store import open_store
from tests.server_process import Server, start_server

pytest.importorskip("fastapi")
pytestmark = pytest.mark.xdist_group("server")  # the module's server starts once, in one worker

MAX_BODY = 65536


@dataclass
class Keys:
    a: str
    b: str
    admin: str
    limited: str


@dataclass
class Served:
    main: Server
    limited: Server
    keys: Keys
    db: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("serve")
    db = f"sqlite:///{folder / 'main.db'}"
    limited_db = f"sqlite:///{folder / 'limited.db'}"
    with open_store(db) as store:
        a, _ = create_key(store, tenant="a")
        b, _ = create_key(store, tenant="b")
        admin, _ = create_key(store, admin=True)
    with open_store(limited_db) as store:
        limited_key, _ = create_key(store, tenant="c")
    main = start_server(db, ["--max-body", str(MAX_BODY), "--rate-limit", "100000"])
    limited = start_server(limited_db, ["--rate-limit", "3"])
    try:
        yield Served(main.ready(), limited.ready(), Keys(a, b, admin, limited_key), db)
    finally:
        main.stop()
        limited.stop()


def client(server: Server, key: str | None) -> httpx.Client:
    headers = {"X-Api-Key": key} if key else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def add(c: httpx.Client, thread: str, *messages: tuple[str, str, str], user: str = "maya") -> httpx.Response:
    body = {"messages": [{"id": i, "role": r, "content": t} for i, r, t in messages], "user_id": user}
    return c.post(f"/v1/threads/{thread}/messages", json=body)


# ----------------------------------------------------------------------------- operations


def test_health_ready_metrics_and_docs_need_no_key(served: Served) -> None:
    c = client(served.main, None)
    assert c.get("/healthz").json() == {"status": "ok"}
    assert c.get("/readyz").json() == {"status": "ready"}
    spec = c.get("/openapi.json").json()
    assert {"/v1/search", "/v1/threads/{thread_id}/messages", "/v1/forget"} <= set(spec["paths"])
    assert c.get("/docs").status_code == 200
    client(served.main, served.keys.a).get("/v1/threads")
    metrics = c.get("/metrics").text
    assert 'remem_http_requests_total{method="GET",route="/v1/threads",status="200"}' in metrics
    assert "remem_http_request_seconds_bucket" in metrics
    for key in (served.keys.a, served.keys.b, served.keys.admin):
        assert key not in metrics
        assert key not in served.main.output()


def test_requests_without_a_valid_key_are_refused_without_echoing_it(served: Served) -> None:
    assert client(served.main, None).get("/v1/threads").status_code == 401
    wrong = served.keys.a[:-4] + "AAAA"
    answer = client(served.main, wrong).get("/v1/threads")
    assert answer.status_code == 401
    assert wrong not in answer.text and "X-Api-Key" in answer.json()["detail"] + "X-Api-Key"
    bearer = httpx.get(
        f"{served.main.url}/v1/threads", headers={"Authorization": f"Bearer {served.keys.a}"}, timeout=30
    )
    assert bearer.status_code == 200


# ----------------------------------------------------------------------------- remem's endpoints


def test_add_messages_is_idempotent_and_pages(served: Served) -> None:
    c = client(served.main, served.keys.a)
    first = add(c, "idem", ("m1", "user", "I like green tea"), ("m2", "assistant", "Noted"))
    assert first.status_code == 200, first.text
    again = add(c, "idem", ("m1", "user", "I like green tea"), ("m2", "assistant", "Noted"))
    assert [m["seq"] for m in again.json()["messages"]] == [0, 1]
    add(c, "idem", ("m3", "user", "And oolong"))
    page = c.get("/v1/threads/idem/messages", params={"limit": 2, "offset": 1}).json()
    assert [m["id"] for m in page["messages"]] == ["m2", "m3"]
    assert page["total"] == 3 and page["next_offset"] is None
    assert c.get("/v1/threads/idem").json()["message_count"] == 3
    assert c.get("/v1/threads/idem/messages", params={"limit": 1}).json()["next_offset"] == 1


def test_summary_card_search_export_and_usage(served: Served) -> None:
    c = client(served.main, served.keys.a)
    add(
        c,
        "card",
        ("c1", "user", "My dog is called Biscuit"),
        ("c2", "assistant", "Lovely name"),
        ("c3", "user", "What should I cook tonight?"),
    )
    card = c.post("/v1/threads/card/card", json={"except_last_messages": 1, "query": "dog name"})
    assert card.status_code == 200, card.text
    body = card.json()
    assert body["content"].startswith("<context_card>") and "Biscuit" in body["content"]
    assert "c3" in body["excluded_message_ids"]
    assert all("score" in r for r in body["records"])
    summary = c.post("/v1/threads/card/summary", json={"except_last": 1}).json()
    assert summary["covered_count"] == 2 and "Biscuit" in summary["text"]
    hits = c.post("/v1/search", json={"query": "dog Biscuit", "thread_id": "card"}).json()["results"]
    assert hits[0]["id"] == "c1" and hits[0]["score"] > 0
    exported = c.get("/v1/threads/card/export").json()
    assert [m["id"] for m in exported["messages"]] == ["c1", "c2", "c3"]
    assert exported["summaries"][-1]["covered_count"] == 2
    usage = c.get("/v1/threads/card/usage").json()
    assert usage["total"]["calls"] == 0 and usage["turns"] == []


def test_usage_reads_the_tenants_rows_of_the_ledger(served: Served) -> None:
    from remem.usage import Meter, open_ledger

    c = client(served.main, served.keys.a)
    add(c, "metered", ("u1", "user", "hello"))
    with open_ledger(served.db) as ledger:
        meter = Meter(ledger)
        meter.record("chat", "m", input_tokens=10, output_tokens=5, thread_id="tenants:a:metered", turn=1)
        meter.record("chat", "m", input_tokens=1, output_tokens=1, thread_id="metered", turn=1)
    usage = c.get("/v1/threads/metered/usage").json()
    assert usage["total"]["calls"] == 1 and usage["total"]["tokens"] == 15
    assert [(t["key"], t["calls"]) for t in usage["turns"]] == [(1, 1)]


def test_concurrent_appenders_on_one_thread_all_land_uniquely_numbered(served: Served) -> None:
    def append(worker: int) -> list[int]:
        seqs = []
        with client(served.main, served.keys.a) as c:
            for n in range(8):
                answer = add(c, "busy", (f"w{worker}-{n}", "user", f"message {n} of {worker}"))
                assert answer.status_code == 200, answer.text
                seqs.extend(m["seq"] for m in answer.json()["messages"])
        return seqs

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        seqs = [s for found in pool.map(append, range(4)) for s in found]
    assert sorted(seqs) == list(range(32))
    stored = client(served.main, served.keys.a).get("/v1/threads/busy/messages").json()["messages"]
    assert [m["seq"] for m in stored] == list(range(32))
    assert len({m["id"] for m in stored}) == 32


# ----------------------------------------------------------------------------- tenants


def test_a_tenant_sees_nothing_of_another(served: Served) -> None:
    a, b = client(served.main, served.keys.a), client(served.main, served.keys.b)
    add(a, "secret", ("s1", "user", "The launch code is swordfish"), user="ann")
    for path in ("/v1/threads/secret", "/v1/threads/secret/messages", "/v1/threads/secret/export"):
        answer = b.get(path)
        assert answer.status_code == 404, path
        assert "swordfish" not in answer.text
    assert b.post("/v1/threads/secret/card", json={}).status_code == 404
    assert b.get("/v1/threads/secret/usage").status_code == 404
    assert all(t["thread_id"] != "secret" for t in b.get("/v1/threads").json()["threads"])
    for query in ({"thread_id": "secret"}, {"user_id": "ann"}):
        found = b.post("/v1/search", json={"query": "launch code swordfish", **query})
        assert found.status_code == 200 and found.json()["results"] == []
    assert b.post("/v1/forget", json={"thread_id": "secret"}).status_code == 404
    # b's own thread of the same name is b's alone
    add(b, "secret", ("s1", "user", "b's own words"), user="ann")
    assert [m["content"] for m in b.get("/v1/threads/secret/messages").json()["messages"]] == [
        "b's own words"
    ]
    assert [m["content"] for m in a.get("/v1/threads/secret/messages").json()["messages"]] == [
        "The launch code is swordfish"
    ]


def test_forget_a_thread_returns_the_erasure_reports(served: Served) -> None:
    a, b = client(served.main, served.keys.a), client(served.main, served.keys.b)
    add(a, "gone", ("g1", "user", "forget me"), user="gina")
    add(b, "gone", ("g1", "user", "keep me"), user="gina")
    answer = a.post("/v1/forget", json={"thread_id": "gone"})
    assert answer.status_code == 200, answer.text
    reports = answer.json()["erasures"]
    assert sum(r["store"]["items"] for r in reports) >= 2
    assert a.get("/v1/threads/gone").status_code == 404
    assert b.get("/v1/threads/gone/messages").json()["total"] == 1


def test_forget_a_user_takes_their_threads_in_this_tenant_only(served: Served) -> None:
    a, b = client(served.main, served.keys.a), client(served.main, served.keys.b)
    add(a, "u-one", ("x1", "user", "one"), user="ursula")
    add(a, "u-two", ("x2", "user", "two"), user="ursula")
    add(a, "u-other", ("x3", "user", "three"), user="otto")
    add(b, "u-one", ("x1", "user", "b's"), user="ursula")
    assert a.post("/v1/forget", json={"user_id": "ursula"}).status_code == 200
    assert a.get("/v1/threads/u-one").status_code == 404
    assert a.get("/v1/threads/u-two").status_code == 404
    assert a.get("/v1/threads/u-other").status_code == 200
    assert b.get("/v1/threads/u-one").status_code == 200


def test_forget_a_user_takes_their_ids_out_of_the_tenants_ingestion_journal(served: Served) -> None:
    import json

    from remem.ingestion import begin_ingestion, list_ingestions
    from remem.memory import Memory
    from remem.server._tenancy import TenantStore

    def journal(store: object, tenant: str) -> str:
        return json.dumps([e.to_value() for e in list_ingestions(Memory(TenantStore(store, tenant)))])

    with open_store(served.db) as store:
        for tenant in ("a", "b"):
            with begin_ingestion(Memory(TenantStore(store, tenant)), kind="load", source="crm.jsonl") as ing:
                ing.add_messages(
                    "iris-import", [{"role": "user", "content": "iris here", "id": "i1"}], user_id="iris"
                )
                ing.add_messages(
                    "ivan-import", [{"role": "user", "content": "ivan here", "id": "v1"}], user_id="ivan"
                )
        assert "iris" in journal(store, "a")
    a = client(served.main, served.keys.a)
    assert a.post("/v1/forget", json={"user_id": "iris"}).status_code == 200
    with open_store(served.db) as store:
        assert "iris" not in journal(store, "a")
        assert "ivan-import" in journal(store, "a")  # another user's part of the same load stays
        assert "iris-import" in journal(store, "b")  # and another tenant's journal is not touched


# ----------------------------------------------------------------------------- keys


def test_key_management_needs_the_admin_key(served: Served) -> None:
    admin, a = client(served.main, served.keys.admin), client(served.main, served.keys.a)
    assert a.get("/v1/keys").status_code == 403
    assert admin.get("/v1/threads").status_code == 403
    made = admin.post("/v1/keys", json={"tenant": "d", "name": "ci"})
    assert made.status_code == 200, made.text
    secret = made.json()["key"]
    listed = admin.get("/v1/keys", params={"tenant": "d"}).json()["keys"]
    assert [k["key_id"] for k in listed] == [made.json()["key_id"]]
    assert secret not in json.dumps(listed)
    assert client(served.main, secret).get("/v1/threads").json()["threads"] == []


def test_rotation_keeps_the_old_key_for_its_grace_and_revoke_ends_it(served: Served) -> None:
    admin = client(served.main, served.keys.admin)
    made = admin.post("/v1/keys", json={"tenant": "e"}).json()
    add(client(served.main, made["key"]), "mine", ("e1", "user", "hello"))
    kept = admin.post(f"/v1/keys/{made['key_id']}/rotate", json={"grace": 3600}).json()
    for key in (made["key"], kept["key"]):
        assert client(served.main, key).get("/v1/threads/mine").status_code == 200
    cut = admin.post(f"/v1/keys/{kept['key_id']}/rotate", json={"grace": 0}).json()
    assert client(served.main, kept["key"]).get("/v1/threads/mine").status_code == 401
    assert client(served.main, cut["key"]).get("/v1/threads/mine").status_code == 200
    assert admin.post(f"/v1/keys/{cut['key_id']}/revoke").status_code == 200
    assert client(served.main, cut["key"]).get("/v1/threads/mine").status_code == 401
    assert admin.post("/v1/keys/nope/revoke").status_code == 404


def test_keys_commands(tmp_path: Path) -> None:
    from remem.cli import main

    db = f"sqlite:///{tmp_path / 'k.db'}"
    runner = CliRunner()
    made = runner.invoke(main, ["keys", "create", "--tenant", "acme", "--db", db, "--json"])
    assert made.exit_code == 0, made.output
    info = json.loads(made.stdout)
    assert info["key"].startswith("rmk_") and info["tenant"] == "acme"
    listed = runner.invoke(main, ["keys", "list", "--db", db, "--json"])
    assert info["key"] not in listed.stdout and json.loads(listed.stdout)[0]["key_id"] == info["key_id"]
    rotated = runner.invoke(main, ["keys", "rotate", info["key_id"], "--grace", "0", "--db", db, "--json"])
    assert rotated.exit_code == 0, rotated.output
    states = {
        k["key_id"]: k["active"]
        for k in json.loads(runner.invoke(main, ["keys", "list", "--db", db, "--json"]).stdout)
    }
    assert states == {info["key_id"]: False, json.loads(rotated.stdout)["key_id"]: True}
    assert runner.invoke(main, ["keys", "create", "--db", db]).exit_code == 2  # no tenant, not admin
    assert runner.invoke(main, ["keys", "create", "--tenant", "a.b", "--db", db]).exit_code == 2


def test_the_key_cache_sees_a_revoke_made_elsewhere_within_its_ttl(tmp_path: Path) -> None:
    """Another worker's (or the CLI's) revoke reaches this process within the cache's ttl; a grace that
    ends is honoured on time from the cache; a key unknown at first is read again (not kept unknown)."""
    from remem.server.keys import KeyCache, revoke_key, rotate_key, verify_key

    now = [0.0]
    with open_store(f"sqlite:///{tmp_path / 'c.db'}") as store:
        cache = KeyCache(store, ttl=1.0, clock=lambda: now[0])
        assert not cache.has_keys()
        secret, info = create_key(store, tenant="a")
        assert cache.has_keys() is False  # known for ttl seconds
        now[0] += 1.0
        assert cache.has_keys() and cache.keyed() is True
        assert cache.lookup(secret) is None and cache.verify(secret) == info
        revoke_key(store, info.key_id)  # as another process would: this cache is not told
        assert cache.lookup(secret) == info and verify_key(store, secret) is None
        now[0] += 1.0
        assert cache.lookup(secret) is None and cache.verify(secret) is None
        assert cache.keyed() is True  # keys never go away

        other, kept = create_key(store, tenant="b")
        assert cache.verify(other) == kept
        rotate_key(store, kept.key_id, grace=0.0)  # its grace ends now
        cache.clear()  # what the server does after a rotation through it
        assert cache.verify(other) is None


def test_a_key_revoked_while_the_cache_reads_it_is_not_kept_as_active(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read finds the key active, then a revoke through this process clears the cache before the
    answer is stored: the next request must read again (it was kept, and worked for one more ttl)."""
    from remem.server import keys
    from remem.server.keys import KeyCache, revoke_key

    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        cache = KeyCache(store, ttl=60.0)
        secret, info = create_key(store, tenant="a")
        read = keys.verify_key

        def read_then_revoke(store_: object, key: str) -> object:
            found = read(store_, key)  # type: ignore[arg-type]
            revoke_key(store, info.key_id)
            cache.clear()  # what the server does after a revoke through it
            return found

        monkeypatch.setattr(keys, "verify_key", read_then_revoke)
        assert cache.verify(secret) == info  # the request in flight was checked before the revoke
        monkeypatch.setattr(keys, "verify_key", read)
        assert cache.lookup(secret) is None and cache.verify(secret) is None


def test_a_server_beyond_loopback_refuses_to_start_without_keys(tmp_path: Path) -> None:
    from remem.cli import main

    answer = CliRunner().invoke(
        main, ["serve", "--db", f"sqlite:///{tmp_path / 'n.db'}", "--host", "0.0.0.0"]
    )
    assert answer.exit_code == 2
    assert "no API keys" in answer.output


# ----------------------------------------------------------------------------- limits and bad input


def test_rate_limit_answers_429_with_retry_after(served: Served) -> None:
    c = client(served.limited, served.keys.limited)
    statuses = [c.get("/v1/threads").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    refused = c.get("/v1/threads")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert served.keys.limited not in refused.text


def test_an_oversized_body_is_413_and_writes_nothing(served: Served) -> None:
    c = client(served.main, served.keys.a)
    big = "x" * (MAX_BODY + 10)
    answer = add(c, "big", ("b1", "user", big))
    assert answer.status_code == 413 and "bytes" in answer.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: streamed
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(MAX_BODY // 1000 + 2):
            yield b"y" * 1000
        yield b'"}]}'

    streamed = c.post(
        "/v1/threads/big/messages", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413
    assert c.get("/v1/threads/big").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "user", "content": "hi"}], "bogus": 1}, "bogus"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": "hi", "id": ""}]}, "messages.0.id"),
        ({"messages": "hi"}, "messages"),
        ({}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(served: Served, body: dict[str, object], field: str) -> None:
    c = client(served.main, served.keys.a)
    answer = c.post("/v1/threads/bad/messages", json=body)
    assert answer.status_code == 422, answer.text
    assert field in answer.json()["detail"]
    assert c.get("/v1/threads/bad").status_code == 404  # nothing written


def test_bad_json_hostile_labels_and_wrong_query_types_are_4xx(served: Served) -> None:
    c = client(served.main, served.keys.a)
    broken = c.post("/v1/search", content=b'{"query":', headers={"content-type": "application/json"})
    assert broken.status_code == 422 and "JSON" in broken.json()["detail"]
    assert add(c, "a.b", ("d1", "user", "hi")).status_code == 200  # any text is an id
    assert "a.b" in [t["thread_id"] for t in c.get("/v1/threads").json()["threads"]]
    assert client(served.main, served.keys.b).get("/v1/threads/a.b").status_code == 404
    nul = add(c, "a%00b", ("d1", "user", "hi"))
    assert nul.status_code == 422 and "thread_id" in nul.json()["detail"]
    assert c.get("/v1/threads/x/messages", params={"limit": "many"}).status_code == 422
    assert c.post("/v1/search", json={"query": "q"}).status_code == 422  # neither user nor thread
    assert c.post("/v1/search", json={"query": "q", "thread_id": "t", "k": -1}).status_code == 422
    assert c.post("/v1/forget", json={}).status_code == 422
    null_byte = c.post("/v1/search", json={"query": "q", "user_id": "u\x00v"})
    assert null_byte.status_code == 422 and "user_id" in null_byte.json()["detail"]


def test_forget_a_tenants_thread_takes_its_extraction_state_and_extracted_memories(served: Served) -> None:
    from tests.tenant_data import extract, of_thread

    a, b = client(served.main, served.keys.a), client(served.main, served.keys.b)
    for c, tenant in ((a, "a"), (b, "b")):
        assert add(c, "wiped", ("w1", "user", "hello"), user="wendy").status_code == 200
        extract(served.db, tenant, "wiped", "wendy", f"{tenant}: the user keeps bees.")
    before = of_thread(served.db, "a", "wiped")
    assert any(ns[2:4] == ("_remem", "extraction") for ns, _ in before)  # its extraction state
    assert any(ns[2] == "users" for ns, _ in before)  # the memory extracted from it
    kept = of_thread(served.db, "b", "wiped")
    assert a.post("/v1/forget", json={"thread_id": "wiped"}).status_code == 200
    assert of_thread(served.db, "a", "wiped") == []
    assert of_thread(served.db, "b", "wiped") == kept  # another tenant's thread of the same id is untouched


def test_forget_a_tenants_user_takes_every_item_naming_them(served: Served) -> None:
    from tests.tenant_data import extract, of_user

    a, b = client(served.main, served.keys.a), client(served.main, served.keys.b)
    for c, tenant in ((a, "a"), (b, "b")):
        # a thread otto opened, in which wanda's turn was extracted: its turn index and state name wanda
        assert add(c, "otto-desk", ("o1", "user", "hi"), user="otto").status_code == 200
        extract(served.db, tenant, "otto-desk", "wanda", f"{tenant}: the user is allergic to nuts.")
    assert len(of_user(served.db, "a", "wanda")) >= 3
    kept = of_user(served.db, "b", "wanda")
    assert a.post("/v1/forget", json={"user_id": "wanda"}).status_code == 200
    assert of_user(served.db, "a", "wanda") == []
    assert of_user(served.db, "b", "wanda") == kept
    assert a.get("/v1/threads/otto-desk").status_code == 200  # otto's thread keeps what is otto's


def test_forget_a_tenants_thread_or_user_takes_its_ledger_rows_and_jobs_only(served: Served) -> None:
    # A tenant's ledger rows and jobs name its threads and users by their tenant ids (TenantMeter,
    # remem.layout.tenant_id); the tenant's forget takes those, never another tenant's of the same ids.
    from remem.jobs import open_queue
    from remem.layout import tenant_id
    from remem.usage import UsageEvent, open_ledger

    a, b = client(served.main, served.keys.a), client(served.main, served.keys.b)
    for c in (a, b):
        assert add(c, "ledgered", ("l1", "user", "hi"), user="lena").status_code == 200
    ids = {t: (tenant_id("ledgered", tenant=t), tenant_id("lena", tenant=t)) for t in ("a", "b")}
    with open_ledger(served.db) as ledger, open_queue(served.db) as queue:
        for thread, user in ids.values():
            ledger.record(UsageEvent("chat", "m", 10, 2, thread_id=thread, user_id=user, turn=1))
            ledger.record(UsageEvent("embedder", "fake", 3, 0, user_id=user))  # the user's alone
            queue.enqueue("summary", {"n": 1}, thread_id=thread, user_id=user)
            queue.enqueue("extraction", {"n": 2}, user_id=user)

    def held() -> tuple[set[tuple[str | None, str | None]], set[tuple[str | None, str | None]]]:
        with open_ledger(served.db) as ledger, open_queue(served.db) as queue:
            rows = {(e.thread_id, e.user_id) for e in ledger.events()}
            jobs = {(j.thread_id, j.user_id) for j in queue.jobs(limit=1000)}
        return rows, jobs

    (a_thread, a_user), (b_thread, b_user) = ids["a"], ids["b"]
    assert a.post("/v1/forget", json={"thread_id": "ledgered"}).status_code == 200
    rows, jobs = held()
    assert (a_thread, a_user) not in rows and (a_thread, a_user) not in jobs
    assert {(None, a_user), (b_thread, b_user), (None, b_user)} <= rows & jobs
    assert a.post("/v1/forget", json={"user_id": "lena"}).status_code == 200
    rows, jobs = held()
    assert not any(a_user in (t, u) or a_thread == t for t, u in rows | jobs)
    assert {(b_thread, b_user), (None, b_user)} <= rows & jobs  # tenant b's are all kept
