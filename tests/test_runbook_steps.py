"""The RUNBOOK.md steps that no other test runs: each one done the way the runbook says, on real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from remem import Memory, Settings
from remem.jobs import enqueue_summary_refresh, open_queue
from tests.openai_server import openai_compatible_server


def _key_file(folder: Path, key: str) -> None:
    (folder / "llm-key.new").write_text(key + "\n", encoding="utf-8")
    os.replace(folder / "llm-key.new", folder / "llm-key")  # a reader never sees half a file


def _wait(condition: object, what: str, process: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if process.poll() is not None:
            raise AssertionError(f"the worker stopped ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_worker_uses_a_rotated_model_key_after_sighup_without_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with Memory.from_url(url, settings=Settings(embedder="fake")) as memory:
        for thread in ("t1", "t2"):
            memory.thread(thread, user_id="maya").add_messages(
                [{"role": "user", "content": f"I keep bees in {thread}.", "id": f"{thread}-m1"}]
            )
    with openai_compatible_server(["- Maya keeps bees."]) as server:
        _key_file(tmp_path, "sk-first-key-0001")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REMEM_", "OPENAI_"))}
        env.update(REMEM_LLM_MODEL="m", REMEM_LLM_BASE_URL=server.url, REMEM_EMBEDDER="fake")
        env["REMEM_LLM_API_KEY_FILE"] = str(tmp_path / "llm-key")
        log = tmp_path / "worker.err"
        worker = subprocess.Popen(
            [sys.executable, "-m", "remem.cli", "worker", "--db", url],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
        )
        try:
            with open_queue(url) as queue:
                enqueue_summary_refresh(queue, "t1")
                _wait(lambda: len(server.headers) == 1, "the first summary call", worker)
                _key_file(tmp_path, "sk-second-key-0002")  # the key is rotated in the mounted file
                worker.send_signal(signal.SIGHUP)
                _wait(lambda: "read again" in log.read_text(), "the worker to take the signal", worker)
                enqueue_summary_refresh(queue, "t2")
                _wait(lambda: len(server.headers) == 2, "the second summary call", worker)
            keys = [h.get("Authorization") or h.get("authorization") for h in server.headers]
            assert keys == ["Bearer sk-first-key-0001", "Bearer sk-second-key-0002"]
            assert worker.poll() is None  # the same process: no restart
        finally:
            worker.send_signal(signal.SIGTERM)
            out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, log.read_text()
    assert "worker stopped after 2 job(s)" in out


def test_a_secret_comes_from_the_file_its_file_variable_names(tmp_path: Path) -> None:
    from remem.config import environment_warnings, load_settings
    from remem.errors import ConfigError

    key = tmp_path / "key"
    key.write_text("sk-from-the-file-1234\n", encoding="utf-8")
    env = {"REMEM_LLM_API_KEY_FILE": str(key)}
    assert load_settings(environ=env, config_file=None).llm_api_key == "sk-from-the-file-1234"
    assert environment_warnings(env) == []
    both = {**env, "REMEM_LLM_API_KEY": "sk-from-the-environment"}  # the variable itself comes first
    assert load_settings(environ=both, config_file=None).llm_api_key == "sk-from-the-environment"
    missing = {"REMEM_LLM_API_KEY_FILE": str(tmp_path / "none")}
    with pytest.raises(ConfigError, match=r"REMEM_LLM_API_KEY_FILE names .* cannot be read"):
        load_settings(environ=missing, config_file=None)
    (tmp_path / "remem.toml").write_text('llm_api_key = "sk-no"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="REMEM_LLM_API_KEY_FILE"):
        load_settings(environ={}, config_file=tmp_path / "remem.toml")


def test_a_server_uses_a_rotated_model_key_after_sighup_without_a_restart(tmp_path: Path) -> None:
    """`remem serve` (one process) reads its configuration again on SIGHUP: the next summary is written
    with the key now in REMEM_LLM_API_KEY_FILE, by the same process. Before, SIGHUP ended the server."""
    import httpx

    from tests.server_process import Server, free_port

    url = f"sqlite:///{tmp_path / 'app.db'}"
    with Memory.from_url(url, settings=Settings(embedder="fake")) as memory:
        for thread in ("t1", "t2"):
            memory.thread(thread, user_id="maya").add_messages(
                [{"role": "user", "content": f"I keep bees in {thread}.", "id": f"{thread}-m1"}]
            )
    with openai_compatible_server(["- Maya keeps bees."]) as model:
        _key_file(tmp_path, "sk-first-key-0001")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REMEM_", "OPENAI_"))}
        env.update(REMEM_LLM_MODEL="m", REMEM_LLM_BASE_URL=model.url, REMEM_EMBEDDER="fake")
        env["REMEM_LLM_API_KEY_FILE"] = str(tmp_path / "llm-key")
        port = free_port()
        log = tmp_path / "server.log"
        command = [sys.executable, "-m", "remem.cli", "serve", "--db", url, "--port", str(port)]
        with log.open("wb") as out:
            process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        server = Server(f"http://127.0.0.1:{port}", process, log).ready()
        try:
            with httpx.Client(base_url=server.url, timeout=60) as c:
                assert c.post("/v1/threads/t1/summary", json={}).status_code == 200
                assert len(model.headers) == 1
                _key_file(tmp_path, "sk-second-key-0002")  # the key is rotated in the mounted file
                process.send_signal(signal.SIGHUP)
                _wait(lambda: "read again" in log.read_text(), "the server to take the signal", process)  # type: ignore[arg-type]
                assert c.post("/v1/threads/t2/summary", json={}).status_code == 200
            keys = [h.get("Authorization") or h.get("authorization") for h in model.headers]
            assert keys == ["Bearer sk-first-key-0001", "Bearer sk-second-key-0002"]
            assert process.poll() is None  # the same process: no restart
            assert "sk-second-key-0002" not in log.read_text() and "sk-first-key-0001" not in log.read_text()
        finally:
            server.stop()
    assert "Application shutdown complete" in log.read_text()  # SIGTERM still ends it gracefully


def _worker_answering(supervisor: int, client_port: int) -> int | None:
    """The worker process holding the server's end of the connection from ``client_port``."""
    import psutil

    for worker in psutil.Process(supervisor).children(recursive=True):
        for c in worker.net_connections(kind="tcp"):
            if c.raddr and c.raddr.port == client_port:
                return int(worker.pid)
    return None


@pytest.mark.postgres
def test_every_worker_uses_a_rotated_model_key_after_sighup(pg_url: str) -> None:
    """`remem serve --workers 2`: SIGHUP to the supervisor replaces each worker with one that read the
    configuration again, so every worker's next summary is written with the key now in the file."""
    import httpx
    import psutil

    from tests.server_process import Server, free_port

    threads = [f"t{n}" for n in range(24)]
    with Memory.from_url(pg_url, settings=Settings(embedder="fake")) as memory:
        for thread in threads:
            memory.thread(thread, user_id="maya").add_messages(
                [{"role": "user", "content": f"I keep bees in {thread}.", "id": f"{thread}-m1"}]
            )
    folder = Path(tempfile.mkdtemp(prefix="remem-sighup-"))
    with openai_compatible_server(["- Maya keeps bees."]) as model:
        _key_file(folder, "sk-first-key-0001")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REMEM_", "OPENAI_"))}
        env.update(REMEM_LLM_MODEL="m", REMEM_LLM_BASE_URL=model.url, REMEM_EMBEDDER="fake")
        env["REMEM_LLM_API_KEY_FILE"] = str(folder / "llm-key")
        port = free_port()
        log = folder / "server.log"
        command = [sys.executable, "-m", "remem.cli", "serve", "--db", pg_url, "--port", str(port)]
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*command, "--workers", "2"], cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        server = Server(f"http://127.0.0.1:{port}", process, log).ready()

        def summarise(thread: str) -> int | None:
            with httpx.Client(base_url=server.url, timeout=60) as c:  # a new connection: any worker
                answer = c.post(f"/v1/threads/{thread}/summary", json={})
                assert answer.status_code == 200, answer.text
                sock = answer.extensions["network_stream"].get_extra_info("socket")
                return _worker_answering(process.pid, sock.getsockname()[1])

        def serving() -> set[int]:  # the workers listening on the port (not multiprocessing's helpers)
            found = set()
            for child in psutil.Process(process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    for c in child.net_connections(kind="tcp"):
                        if c.status == psutil.CONN_LISTEN and c.laddr.port == port:
                            found.add(child.pid)
            return found

        try:
            _wait(lambda: len(serving()) == 2, "both workers to listen", process, timeout=240)  # type: ignore[arg-type]
            old = serving()
            summarise(threads[0])
            _key_file(folder, "sk-second-key-0002")  # the key is rotated in the mounted file
            process.send_signal(signal.SIGHUP)

            def replaced() -> bool:
                now = serving()
                return len(now) == 2 and not now & old

            _wait(replaced, "both workers to be replaced", process, timeout=240)  # type: ignore[arg-type]
            answered: list[int | None] = []
            for thread in threads[1:]:
                answered.append(summarise(thread))
                if len(set(answered) - {None}) == 2:
                    break
            keys = [h.get("Authorization") or h.get("authorization") for h in model.headers]
            assert keys == ["Bearer sk-first-key-0001"] + ["Bearer sk-second-key-0002"] * len(answered)
            assert len(set(answered) - {None}) == 2, answered  # both new workers answered with it
            assert process.poll() is None  # the supervisor stayed up
            assert "sk-second-key-0002" not in log.read_text() and "sk-first-key-0001" not in log.read_text()
        finally:
            server.stop()
    assert "Application shutdown complete" in log.read_text()
