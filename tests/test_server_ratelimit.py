"""The per-key rate limit of ``remem serve --workers 2`` on PostgreSQL is one count across the workers:
the bucket is a row of the database, not a dict in each worker process."""

from __future__ import annotations

import contextlib
import http.client
import time

import pytest

from remem.server.keys import create_key
from remem.store import open_store
from tests.conftest import POSTGRES_URL, _fresh_database
from tests.server_process import Server, running_server

pytest.importorskip("fastapi")
psutil = pytest.importorskip("psutil")

PER_MINUTE = 20  # a burst of 20, then one request every 3 s


def _workers_of(server: Server, conns: list[http.client.HTTPConnection]) -> list[int]:
    """The worker process holding the server's end of each of ``conns`` (one look at the workers' sockets
    for all of them, not one each)."""
    wanted = []
    for conn in conns:
        assert conn.sock is not None
        wanted.append(conn.sock.getsockname()[:2])
    found: dict[tuple[str, int], int] = {}
    for _ in range(200):  # connect() returns before a worker has accepted the connection
        for child in psutil.Process(server.process.pid).children(recursive=True):
            for c in child.net_connections(kind="tcp"):
                if c.raddr and (c.raddr.ip, c.raddr.port) in wanted:
                    found[(c.raddr.ip, c.raddr.port)] = int(child.pid)
        if len(found) == len(wanted):
            return [found[local] for local in wanted]
        time.sleep(0.05)
    raise LookupError(f"no worker holds the other end of {set(wanted) - set(found)}")


def _wait_for_both_listening(server: Server, port: int) -> None:
    """Until both workers listen on the port: ``/healthz`` answered says only that one does, and until the
    other listens the kernel gives every new connection to the first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        listening = set()
        for child in psutil.Process(server.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                for c in child.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN and c.laddr.port == port:
                        listening.add(child.pid)
        if len(listening) == 2:
            return
        time.sleep(0.05)
    raise AssertionError(f"the two workers never both listened on {port}:\n{server.output()}")


@pytest.mark.postgres
def test_two_workers_on_postgres_share_one_bucket_per_key() -> None:
    for url in _fresh_database(POSTGRES_URL):
        with open_store(url) as store:
            key, _ = create_key(store, tenant="a")
        with running_server(url, ["--workers", "2", "--rate-limit", str(PER_MINUTE)]) as server:
            host, port = server.url.removeprefix("http://").split(":")
            _wait_for_both_listening(server, int(port))
            by_worker: dict[int, list[http.client.HTTPConnection]] = {}
            opened = []
            try:
                for _ in range(12):  # new connections, spread by the kernel over both workers' sockets
                    batch = [http.client.HTTPConnection(host, int(port), timeout=60) for _ in range(10)]
                    for conn in batch:
                        conn.connect()
                    opened.extend(batch)
                    for conn, pid in zip(batch, _workers_of(server, batch), strict=True):
                        by_worker.setdefault(pid, []).append(conn)
                    if len(by_worker) == 2 and min(len(c) for c in by_worker.values()) >= 25:
                        break  # enough on each worker
                assert len(by_worker) == 2, {pid: len(c) for pid, c in by_worker.items()}
                (one, first), (two, second) = ((pid, conns[:25]) for pid, conns in by_worker.items())
                assert len(first) == len(second) == 25, {pid: len(c) for pid, c in by_worker.items()}
                answers: dict[int, list[tuple[int, str | None, bytes]]] = {}
                started = time.monotonic()
                for pair in zip(first, second, strict=True):  # the workers in turn, one request each
                    for pid, conn in zip((one, two), pair, strict=True):
                        conn.request("GET", "/v1/threads", headers={"X-Api-Key": key})
                        response = conn.getresponse()
                        body = response.read()
                        answers.setdefault(pid, []).append(
                            (response.status, response.getheader("Retry-After"), body)
                        )
                elapsed = time.monotonic() - started
            finally:
                for conn in opened:
                    conn.close()
            statuses = [status for found in answers.values() for status, _, _ in found]
            assert set(statuses) <= {200, 429}
            granted = statuses.count(200)
            # The burst, and what refilled at the configured rate while the 50 requests ran; each worker
            # counting its own would have let 2 x 20 through.
            assert PER_MINUTE <= granted <= PER_MINUTE + int(elapsed * PER_MINUTE / 60) + 1, (
                granted,
                elapsed,
            )
            for found in answers.values():  # both workers refused, each for the other's requests too
                refused = [(after, body) for status, after, body in found if status == 429]
                assert refused, found
                for after, body in refused:
                    assert after is not None and 1 <= int(after) <= 60 // PER_MINUTE, after
                    assert b"RateLimited" in body and key.encode() not in body
