"""``remem serve --workers 2`` on the machine's PostgreSQL: both workers append to one thread at once, and
tenants stay apart (one server for the module); and a SIGTERM in the middle of appends (SQLite)."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from remem.server._services import STORE_POOL_SIZE
from remem.server.keys import create_key
from remem.store import open_store
from tests.conftest import POSTGRES_URL, _fresh_database
from tests.server_process import Server, running_server, server_side_option

pytest.importorskip("fastapi")
pytestmark = pytest.mark.xdist_group("server_postgres")  # the module's server starts once, in one worker


@pytest.fixture(scope="module")
def served_db() -> Iterator[str]:
    """The fresh database ``served`` serves."""
    yield from _fresh_database(POSTGRES_URL)


@pytest.fixture(scope="module")
def served(served_db: str) -> Iterator[tuple[Server, str, str]]:
    with open_store(served_db) as store:
        a, _ = create_key(store, tenant="a")
        b, _ = create_key(store, tenant="b")
    with running_server(served_db, ["--workers", "2", "--rate-limit", "0"]) as server:
        yield server, a, b


@pytest.mark.postgres
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


@pytest.mark.postgres
def test_tenants_stay_apart_on_postgres(served: tuple[Server, str, str]) -> None:
    server, a, b = served
    ca = httpx.Client(base_url=server.url, headers={"X-Api-Key": a}, timeout=60)
    cb = httpx.Client(base_url=server.url, headers={"X-Api-Key": b}, timeout=60)
    body = {"messages": [{"id": "p1", "role": "user", "content": "postgres secret"}], "user_id": "pat"}
    assert ca.post("/v1/threads/pg/messages", json=body).status_code == 200
    assert cb.get("/v1/threads/pg").status_code == 404
    assert cb.post("/v1/search", json={"query": "postgres secret", "user_id": "pat"}).json()["results"] == []
    assert ca.get("/readyz").json() == {"status": "ready"}


def test_sigterm_lets_requests_in_flight_finish_and_loses_nothing_acknowledged(tmp_path: object) -> None:
    """Its own server (SQLite): appenders keep writing while it gets SIGTERM; it shuts down gracefully, and every message
    it acknowledged is stored, numbered without a gap."""
    import threading
    import time
    from pathlib import Path

    from remem import Memory, load_settings
    from tests.server_process import start_server

    db = f"sqlite:///{Path(str(tmp_path)) / 'term.db'}"
    server = start_server(db).ready()
    acknowledged: list[str] = []
    stop = threading.Event()

    def append(worker: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            n = 0
            while not stop.is_set():
                body = {"messages": [{"id": f"w{worker}-{n}", "role": "user", "content": f"m {n}"}]}
                try:
                    answer = c.post("/v1/threads/term/messages", json=body)
                except httpx.HTTPError:
                    return  # the server has stopped listening
                if answer.status_code == 200:
                    acknowledged.append(f"w{worker}-{n}")
                n += 1

    workers = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    while len(acknowledged) < 20:
        time.sleep(0.05)
    # uvicorn shuts down gracefully, then ends with the signal it got (exit status -SIGTERM)
    assert server.stop() in (0, -15)
    stop.set()
    for w in workers:
        w.join()
    assert "Application shutdown complete" in server.output() and "Finished server process" in server.output()
    with Memory.from_url(db, settings=load_settings(config_file=None, embedder="fake")) as memory:
        stored = memory.get_thread("term").messages()
    assert set(acknowledged) <= {m.id for m in stored}
    assert [m.seq for m in stored] == list(range(len(stored)))


@pytest.mark.postgres
@pytest.mark.skipif(
    not hasattr(os, "pidfd_open"), reason="reads the worker's socket through pidfd_getfd (Linux)"
)
def test_two_workers_answer_on_connections_with_nagle_off(served: tuple[Server, str, str]) -> None:
    """With --workers N uvicorn's own socket never gets TCP_NODELAY (Kludex/uvicorn#3149) and each small
    answer waits ~40 ms on Nagle and delayed ACK; remem serve binds the socket itself. Read on the worker's
    end of a live connection."""
    server, _, _ = served
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert client.recv(4096).startswith(b"HTTP/1.1 200")  # accepted and answered by a worker
        assert server_side_option(server, client, socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.postgres
def test_each_worker_listens_on_a_socket_of_its_own_and_connections_reach_both(
    served: tuple[Server, str, str],
) -> None:
    """Workers sharing one listening socket left kept-alive clients piled on one worker; each binds its
    own (SO_REUSEPORT) and the kernel spreads new connections over them. The supervisor listens on none."""
    import psutil

    server, _, _ = served
    port = int(server.url.rsplit(":", 1)[1])

    def listening(pid: int) -> set[int]:
        found = psutil.Process(pid).net_connections(kind="tcp")
        fds = {c.fd for c in found if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        return {os.stat(f"/proc/{pid}/fd/{fd}").st_ino for fd in fds}

    def workers_listening() -> dict[int, set[int]]:
        children = psutil.Process(server.process.pid).children(recursive=True)
        return {p.pid: found for p in children if (found := listening(p.pid))}

    # The server answers once one worker is up; on a loaded machine the second may still be starting.
    deadline = time.monotonic() + 60
    while len(workers := workers_listening()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listening(server.process.pid) == set()
    assert len(workers) == 2 and all(len(found) == 1 for found in workers.values())
    assert len(set.union(*workers.values())) == 2  # two sockets, not one shared
    clients = [httpx.Client(base_url=server.url) for _ in range(24)]  # 24 hashed connections: both get some
    try:
        for c in clients:
            assert c.get("/healthz").status_code == 200
        held = [
            sum(
                1
                for c in psutil.Process(pid).net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
            )
            for pid in workers
        ]
        assert all(n > 0 for n in held), held
    finally:
        for c in clients:
            c.close()


def test_the_listening_socket_hands_nagle_off_to_accepted_connections() -> None:
    """The factory itself, accepted the way uvicorn's workers accept (asyncio's create_server on it), next
    to uvicorn's own socket, which does not (so the check can tell them apart)."""
    import asyncio

    from remem.cli.serve import listening_socket

    async def accepted_option(sock: socket.socket) -> int:
        got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                theirs = transport.get_extra_info("socket")
                got.set_result(theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            value = await asyncio.wait_for(got, 30)
            writer.close()
        return value

    ours = listening_socket("127.0.0.1", 0)
    assert asyncio.run(accepted_option(ours)) != 0
    uvicorns = socket.socket(family=socket.AF_INET)  # uvicorn.Config.bind_socket's
    uvicorns.bind(("127.0.0.1", 0))
    assert asyncio.run(accepted_option(uvicorns)) == 0


def test_a_port_in_use_is_a_clear_remem_error_naming_the_way_out() -> None:
    from remem.cli.serve import listening_socket
    from remem.errors import RememRuntimeError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RememRuntimeError, match=f"cannot listen on 127.0.0.1:{port}: .*--port"):
            listening_socket("127.0.0.1", port)


@pytest.mark.postgres
def test_a_worker_killed_mid_append_loses_nothing_acknowledged_and_leaves_no_lease() -> None:
    """Two workers; four clients append to one thread, each retrying a message until it is acknowledged
    (the same id: a retry stores nothing twice). The worker whose database session holds the thread's
    lease (a PostgreSQL advisory lock) is SIGKILLed while it holds it. The others go on at once (the lease
    died with the session, well before the 300 s a waiter would wait for it), every acknowledged message
    is stored once, numbered without a gap, and no lease is left held."""
    import signal
    import threading
    import time

    import psycopg

    from tests.server_process import pid_with_local_port

    for url in _fresh_database(POSTGRES_URL):
        env = {"REMEM_THREAD_LEASE_TIMEOUT": "300"}
        with running_server(url, ["--workers", "2", "--rate-limit", "0"], env=env) as server:
            acknowledged: list[str] = []
            stop = threading.Event()

            def append(worker: int, stop: threading.Event = stop, acked: list[str] = acknowledged) -> None:
                n = 0
                c = httpx.Client(base_url=server.url, timeout=60)
                while not stop.is_set():
                    body = {"messages": [{"id": f"w{worker}-{n}", "role": "user", "content": f"m {n}"}]}
                    try:
                        answer = c.post("/v1/threads/killed/messages", json=body)
                    except httpx.HTTPError:  # its worker died under it: again, on a new connection
                        c.close()
                        c = httpx.Client(base_url=server.url, timeout=60)
                        continue
                    if answer.status_code == 200:
                        acked.append(body["messages"][0]["id"])
                        n += 1
                c.close()

            appenders = [threading.Thread(target=append, args=(w,)) for w in range(4)]
            for a in appenders:
                a.start()
            try:
                deadline = time.monotonic() + 120
                while len(acknowledged) < 12 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert len(acknowledged) >= 12, server.output()
                killed = None
                with psycopg.connect(url, autocommit=True) as db:
                    while killed is None and time.monotonic() < deadline:
                        row = db.execute(
                            "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                            " WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()"
                            " AND a.pid <> pg_backend_pid() LIMIT 1"
                        ).fetchone()
                        holder = None if row is None else pid_with_local_port(server, row[0])
                        if holder is not None and holder != server.process.pid:
                            os.kill(holder, signal.SIGKILL)
                            killed = holder
                assert killed is not None, "no worker was seen holding the thread's lease"
                before = len(acknowledged)
                while len(acknowledged) < before + 12 and time.monotonic() < deadline + 60:
                    time.sleep(0.05)
                assert len(acknowledged) >= before + 12, "appends stopped after the kill: a lease left held?"
            finally:
                stop.set()
                for a in appenders:
                    a.join()
            with httpx.Client(base_url=server.url, timeout=60) as c:
                stored = c.get("/v1/threads/killed/messages", params={"limit": 1000}).json()["messages"]
            ids = [m["id"] for m in stored]
            assert set(acknowledged) <= set(ids) and len(ids) == len(set(ids))
            assert [m["seq"] for m in stored] == list(range(len(stored)))
            with psycopg.connect(url, autocommit=True) as db:
                held = db.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                    " WHERE l.locktype = 'advisory' AND a.datname = current_database()"
                ).fetchone()
            assert held == (0,)
            # the supervisor's own word for it (the thread's name, "killed", was in the access log once)
            deadline = time.monotonic() + 60
            while "died" not in server.output() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert f"Child process [{killed}] died" in server.output(), server.output()


def _metric(text: str, name: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert len(values) == 1, f"{name} not in /metrics"
    return values[0]


@pytest.mark.postgres
def test_metrics_show_pool_use_and_lease_waits(served: tuple[Server, str, str]) -> None:
    """/metrics of the worker that answered (one kept-alive connection: one worker) counts the leases its
    appends took and shows its database pools."""
    server, a, _ = served
    with httpx.Client(base_url=server.url, headers={"X-Api-Key": a}, timeout=60) as c:
        before = _metric(c.get("/metrics").text, "remem_lease_acquired_total")
        for n in range(3):
            body = {"messages": [{"id": f"metrics-{n}", "role": "user", "content": f"m {n}"}]}
            assert c.post("/v1/threads/metered/messages", json=body).status_code == 200
        text = c.get("/metrics").text
    assert _metric(text, "remem_lease_acquired_total") >= before + 3
    assert _metric(text, "remem_lease_wait_seconds_total") >= 0
    assert _metric(text, "remem_lease_busy_total") >= 0
    # the checkpointer's pool and the store's
    for pool in ("checkpoint", "store"):
        assert _metric(text, f'remem_db_pool_connections{{pool="{pool}",state="max"}}') >= 1
        assert _metric(text, f'remem_db_pool_connections{{pool="{pool}",state="size"}}') >= 1
        assert _metric(text, f'remem_db_pool_connections{{pool="{pool}",state="waiting"}}') >= 0
    assert _metric(text, 'remem_db_pool_connections{pool="store",state="max"}') == STORE_POOL_SIZE


@pytest.mark.postgres
def test_one_worker_serves_a_request_while_another_waits_in_the_database(pg_url: str) -> None:
    """One worker, two requests at once: a put that waits for a row lock held outside, and a read, which
    the worker answers on another connection of its store's pool (on one connection it would wait)."""
    import time

    import psycopg

    item = {"namespace": ["a"], "key": "held", "value": {"v": 0}}
    with (
        running_server(pg_url, ["--rate-limit", "0"]) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        psycopg.connect(pg_url, autocommit=True) as admin,
        psycopg.connect(pg_url) as holder,
    ):
        assert c.put("/store/items", json=item).status_code == 204
        assert c.put("/store/items", json={**item, "key": "free"}).status_code == 204
        holder.execute("SELECT 1 FROM remem_items WHERE key = 'held' FOR UPDATE")
        put = pool.submit(
            httpx.put, f"{server.url}/store/items", json={**item, "value": {"v": 2}}, timeout=60
        )
        for _ in range(600):  # a hang guard: the put reaches the row lock at once
            waiting = admin.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                break
            assert not put.done(), put.result().text
            time.sleep(0.05)
        else:
            raise AssertionError("the put never waited for the row lock")
        answer = c.get("/store/items", params={"namespace": "a", "key": "free"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["value"] == {"v": 0}
        assert not put.done()
        assert _metric(c.get("/metrics").text, 'remem_db_pool_connections{pool="store",state="size"}') >= 2
        holder.rollback()
        assert put.result(timeout=60).status_code == 204
        assert c.get("/store/items", params={"namespace": "a", "key": "held"}).json()["value"] == {"v": 2}


@pytest.mark.postgres
def test_forget_a_tenants_thread_leaves_nothing_of_it_on_postgres(
    served: tuple[Server, str, str], served_db: str
) -> None:
    from tests.tenant_data import extract, of_thread

    server, a, b = served
    for key, tenant in ((a, "a"), (b, "b")):
        with httpx.Client(base_url=server.url, headers={"X-Api-Key": key}, timeout=60) as c:
            body = {"messages": [{"id": "w1", "role": "user", "content": "hello"}], "user_id": "wendy"}
            assert c.post("/v1/threads/wiped/messages", json=body).status_code == 200
        extract(served_db, tenant, "wiped", "wendy", f"{tenant}: the user keeps bees.")
    assert any(ns[2:4] == ("_remem", "extraction") for ns, _ in of_thread(served_db, "a", "wiped"))
    kept = of_thread(served_db, "b", "wiped")
    with httpx.Client(base_url=server.url, headers={"X-Api-Key": a}, timeout=60) as c:
        answer = c.post("/v1/forget", json={"thread_id": "wiped"})
    assert answer.status_code == 200, answer.text
    assert of_thread(served_db, "a", "wiped") == []
    assert of_thread(served_db, "b", "wiped") == kept
