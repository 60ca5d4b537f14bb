"""remem as a user installs it: the built wheel, in a clean virtualenv, brings everything it needs.

The wheel is built from a copy of the checkout and installed, with the project's constraints.txt, into a fresh
virtualenv for each Python from 3.11 to 3.13 found on this machine; then the README's Python snippets run on
each, offline. uv builds and installs (seconds, where pip spends most of a minute per virtualenv fetching
index pages); ``REMEM_TEST_WHEEL_INSTALLER=pip`` checks the same with pip.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.openai_server import openai_compatible_server

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.11", "3.12", "3.13")
INSTALLER = os.environ.get("REMEM_TEST_WHEEL_INSTALLER", "uv")
# Every test here shares one wheel and its virtualenvs: one xdist worker builds them once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]


def find_python(version: str) -> str | None:
    """An interpreter for ``version``: on the PATH, or one that pyenv installed."""
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"), reverse=True)
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a new user: no REMEM_* setting, no key, nothing on PYTHONPATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REMEM_", "PYTHON", "VIRTUAL_ENV")) and k != "OPENAI_API_KEY"
    }
    # uv never fetches an interpreter of its own: only the ones found here are tested.
    return {**env, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", **extra}


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=900, check=False
    )


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert found, "uv is a dev dependency: run make install"
    return found


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("checkout") / "remem"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".remem", ".*_cache", ".hypothesis"
        ),
    )
    out = tmp_path_factory.mktemp("dist")
    if INSTALLER == "pip":
        build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)]
    else:
        build = [uv(), "build", "-q", "--wheel", "--out-dir", str(out), str(source)]
    done = run(build, out)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("remem-*.whl")
    return built


@dataclass
class Venv:
    version: str
    python: Path | None  # None: no interpreter for this version here
    install: subprocess.CompletedProcess[str] | None


@pytest.fixture(scope="session")
def venvs(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Venv]]:
    root = tmp_path_factory.mktemp("venvs")
    constraints = str(ROOT / "constraints.txt")

    def install(version: str) -> Venv:
        base = find_python(version)
        if base is None:
            return Venv(version, None, None)
        venv = root / f"py{version}"
        python = venv / "bin" / "python"
        if INSTALLER == "pip":
            made = run([base, "-m", "venv", str(venv)], root)
            assert made.returncode == 0, made.stderr
            done = run([str(python), "-m", "pip", "install", "-q", "-c", constraints, str(wheel)], root)
        else:
            made = run([uv(), "venv", "-q", "--python", base, str(venv)], root)
            assert made.returncode == 0, made.stderr
            done = run(
                [uv(), "pip", "install", "-q", "--python", str(python), "-c", constraints, str(wheel)], root
            )
        return Venv(version, python, done)

    with ThreadPoolExecutor(len(VERSIONS)) as pool:
        yield {v.version: v for v in pool.map(install, VERSIONS)}


@pytest.fixture(params=VERSIONS)
def python(request: pytest.FixtureRequest, venvs: dict[str, Venv]) -> Path:
    venv = venvs[request.param]
    if venv.python is None:
        pytest.skip(f"no Python {venv.version} on this machine")
    assert venv.install is not None
    assert venv.install.returncode == 0, venv.install.stderr[-3000:]
    return venv.python


def readme_snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_has_python_snippets() -> None:
    assert len(readme_snippets()) >= 3


def test_the_wheel_ships_the_tokenizer_with_its_licence(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        tokenizer = archive.read("remem/data/minilm/tokenizer.json")
        notice = archive.read("remem/data/minilm/NOTICE").decode()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"remem/py.typed", "remem/data/minilm/LICENSE"} <= names
    assert hashlib.sha256(tokenizer).hexdigest() in notice
    assert "Apache License" in notice
    # remem's own licence travels with the wheel, next to the model's.
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-File: LICENSE" in metadata
    # The extras the error messages name, and no runtime dependency that only one platform has wheels for.
    assert {"postgres", "tokens", "sqlite", "torch"} <= set(
        re.findall(r"^Provides-Extra: (\S+)", metadata, re.M)
    )
    requires = "\n".join(re.findall(r"^Requires-Dist: .*$", metadata, re.M))  # not the README's words
    assert requires and "pysqlite3" not in requires and "sqlite-vec" not in requires


def test_every_extra_an_error_names_is_declared() -> None:
    named = set()
    for path in (ROOT / "src").rglob("*.py"):
        named |= set(re.findall(r"for_extra\([^)]*?,\s*\"([a-z]+)\"\)", path.read_text(encoding="utf-8")))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert named, "the pattern above no longer finds the calls"
    assert named <= set(declared)


def test_the_installed_wheel_has_its_dependencies_and_its_command(python: Path, tmp_path: Path) -> None:
    if INSTALLER == "pip":
        check = run([str(python), "-m", "pip", "check"], tmp_path)
    else:
        check = run([uv(), "pip", "check", "--python", str(python)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    cli = run([str(python.parent / "remem"), "--help"], tmp_path)
    assert cli.returncode == 0 and "demo" in cli.stdout, cli.stderr


# Runs in the installed virtualenv, in one process (each interpreter start costs seconds of imports):
# the offline embedder, the errors of missing extras, then every README snippet as a script of its own
# in a fresh folder; a snippet that stops for want of a model runs again with one configured.
DRIVER = r"""
import json, os, runpy, sys, traceback
from pathlib import Path

report = {}
import remem
report["remem_file"] = remem.__file__

from remem.embeddings import default_embedder
v = default_embedder().embed_array(["I live in Lisbon", "my home is in Lisbon", "the cat sat down"])
report["embedding"] = {"shape": list(v.shape), "near": float(v[0] @ v[1]), "far": float(v[0] @ v[2])}

from langchain_core.messages import HumanMessage
from remem import MissingDependencyError, checkpointer_from_url
from remem.messages import exact_token_counter

attempts = {
    "checkpointer_from_url(postgresql://...)": lambda: checkpointer_from_url("postgresql://u@127.0.0.1:9/d").__enter__(),
    "import remem.store.postgres": lambda: __import__("remem.store.postgres"),
    "exact_token_counter": lambda: exact_token_counter("o200k_base")([HumanMessage("hi")]),
}
report["extras"] = {}
for name, attempt in attempts.items():
    try:
        attempt()
        report["extras"][name] = "no error"
    except MissingDependencyError as exc:
        report["extras"][name] = str(exc)

def run_snippet(path):
    os.chdir(path.parent)
    try:
        runpy.run_path(str(path), run_name="__main__")
        return None
    except BaseException as exc:
        return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"

report["snippets"] = []
server_url = sys.argv[2]
for script in sorted(Path(sys.argv[1]).glob("*/snippet.py")):
    offline = run_snippet(script)
    with_model = None
    if offline is not None:
        os.environ.update(REMEM_LLM_MODEL="local-model", REMEM_LLM_BASE_URL=server_url)
        with_model = run_snippet(script)
        del os.environ["REMEM_LLM_MODEL"], os.environ["REMEM_LLM_BASE_URL"]
    report["snippets"].append({"offline": offline, "with_model": with_model})
print(json.dumps(report))
"""


def test_the_readme_and_the_offline_embedder_run_on_the_installed_wheel(python: Path, tmp_path: Path) -> None:
    snippets = readme_snippets()
    for index, snippet in enumerate(snippets):
        folder = tmp_path / f"{index:02d}"
        folder.mkdir()
        (folder / "snippet.py").write_text(snippet, encoding="utf-8")
    (tmp_path / "driver.py").write_text(DRIVER, encoding="utf-8")
    with openai_compatible_server(["Biscuit is a good name for a dog."]) as server:
        done = run([str(python), str(tmp_path / "driver.py"), str(tmp_path), server.url], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])

    assert Path(report["remem_file"]).is_relative_to(python.parent.parent)  # the wheel, not the checkout
    embedding = report["embedding"]
    assert embedding["shape"] == [3, 384]
    assert embedding["near"] > 0.6 and embedding["far"] < 0.2, embedding
    for attempt, message in report["extras"].items():
        extra = "tokens" if "token" in attempt else "postgres"
        assert f"pip install 'remem[{extra}]'" in message, (attempt, message)

    assert len(report["snippets"]) == len(snippets)
    for index, result in enumerate(report["snippets"]):
        if result["offline"] is None:
            continue
        # A snippet may only stop for want of a model, with the message that says what to configure.
        assert result["offline"].startswith("ConfigError: build_agent was given no chat model"), (
            snippets[index],
            result["offline"],
        )
        assert "REMEM_LLM_MODEL" in result["offline"]
        assert result["with_model"] is None, (snippets[index], result["with_model"])
    needed_a_model = [i for i, result in enumerate(report["snippets"]) if result["offline"] is not None]
    assert needed_a_model == [0]  # "Use it": the one snippet that talks to the configured model
    assert len(server.requests) == 1  # the refused run wrote nothing that the next run would send again
