"""A real ``remem serve`` for the server tests: uvicorn in a child process on a free loopback port.

``running_server(url, ...)`` starts it (the deterministic fake embedder, a scratch working folder so no
``remem.toml`` is read), waits for ``/healthz``, yields a :class:`Server` and stops it with SIGTERM (the
graceful path), killing it only if it does not end. Several may be started at once with
:func:`start_server` / :meth:`Server.ready`, so their start-ups overlap.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

START_TIMEOUT = 120.0  # a fresh interpreter importing remem, LangGraph and FastAPI on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self, timeout: float = START_TIMEOUT) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"remem serve ended ({self.process.returncode}):\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"remem serve did not answer in {timeout} s:\n{self.output()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_server(db_url: str, args: Sequence[str] = (), env: dict[str, str] | None = None) -> Server:
    """Start ``remem serve --db db_url`` (not waiting for it: call :meth:`Server.ready`)."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="remem-serve-"))
    log = folder / "server.log"
    command = [sys.executable, "-m", "remem.cli", "serve", "--db", db_url, "--port", str(port), *args]
    environment = {**os.environ, "REMEM_EMBEDDER": "fake", **(env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=folder, env=environment, stdout=out, stderr=subprocess.STDOUT)
    return Server(f"http://127.0.0.1:{port}", process, log)


@contextlib.contextmanager
def running_server(
    db_url: str, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[Server]:
    server = start_server(db_url, args, env)
    try:
        yield server.ready()
    finally:
        server.stop()


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def server_side_option(server: Server, client: socket.socket, level: int, option: int) -> int:
    """A socket option of the server's end of ``client``'s connection, read from the worker process that
    accepted it (a copy of its descriptor through ``pidfd_getfd``, Linux 5.6+: the server is our child)."""
    import ctypes

    getfd = 438  # SYS_pidfd_getfd, the same number on every Linux architecture
    libc = ctypes.CDLL(None, use_errno=True)
    peer = client.getsockname()
    for pid in _descendants(server.process.pid):
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                        continue
                    copy = libc.syscall(getfd, pidfd, int(fd), 0)
                    if copy < 0:
                        raise OSError(ctypes.get_errno(), "pidfd_getfd failed")
                    with socket.socket(fileno=copy) as theirs, contextlib.suppress(OSError):
                        if theirs.getpeername() == peer:
                            return int(theirs.getsockopt(level, option))
            finally:
                os.close(pidfd)
    raise LookupError(f"no process of the server holds the other end of {peer}")


def pid_with_local_port(server: Server, port: int) -> int | None:
    """The server's process (a worker) that holds a TCP socket bound locally to ``port`` (from /proc)."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes[fields[9]] = port
    for pid in _descendants(server.process.pid):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return pid
    return None


def never_answers(conn: object) -> None:
    """A worker that holds its end of the supervisor's health-check pipe and never answers (until killed)."""
    import threading

    threading.Event().wait()
