"""RUNBOOK.md stays true: every test it names exists, and every `remem ...` command it gives is one."""

from __future__ import annotations

import re
from pathlib import Path

import click

from remem.cli import main

ROOT = Path(__file__).parent.parent
RUNBOOK = (ROOT / "RUNBOOK.md").read_text(encoding="utf-8")


def _tests() -> set[str]:
    return {
        m
        for path in (ROOT / "tests").glob("test_*.py")
        for m in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M)
    }


def test_every_test_the_runbook_names_exists() -> None:
    named = set(re.findall(r"\b(test_\w+)", RUNBOOK))
    files = set(re.findall(r"tests/(test_\w+\.py)", RUNBOOK))
    assert len(named) >= 10
    assert named - {f.removesuffix(".py") for f in files} <= _tests(), sorted(named - _tests())
    assert all((ROOT / "tests" / f).is_file() for f in files), files


def test_every_command_the_runbook_gives_exists() -> None:
    commands = re.findall(r"`remem ([a-z][a-z ]*?)(?: [-A-Z\[`]|`)", RUNBOOK)
    commands += re.findall(r"^remem ([a-z][a-z ]*?)(?: [-A-Z]|$)", RUNBOOK, re.M)
    assert len(commands) >= 10
    for words in commands:
        group: click.Command = main
        for word in words.split():
            if not isinstance(group, click.Group) or word not in group.commands:
                break
            group = group.commands[word]
        assert not isinstance(group, click.Group) and group is not main, f"`remem {words}` is not a command"


def _runbook_commands() -> list[tuple[str, ...]]:
    """Each `remem ...` command the runbook gives, as its command path (options and values left out)."""
    found = re.findall(r"`remem ([a-z][a-z ]*?)(?: [-A-Z\[`<]|`)", RUNBOOK)
    found += re.findall(r"^remem ([a-z][a-z ]*?)(?: [-A-Z]|$)", RUNBOOK, re.M)
    paths = set()
    for words in found:
        group: click.Command = main
        path: list[str] = []
        for word in words.split():
            if not isinstance(group, click.Group) or word not in group.commands:
                break
            group = group.commands[word]
            path.append(word)
        paths.add(tuple(path))
    return sorted(paths)


def test_every_command_the_runbook_gives_is_run_by_a_test() -> None:
    """A command path counts as run when a test calls it: its words as consecutive items of an argument
    list (``["ingest", "undo", ...]``, ``"remem.cli", "worker"``), as CliRunner and subprocess take them."""
    sources = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("*.py") if p.name != "test_runbook.py"
    )
    commands = _runbook_commands()
    assert ("ingest", "undo") in commands and ("keys", "rotate") in commands and ("worker",) in commands
    untested = [
        path
        for path in commands
        if not re.search(r"[\[(,]\s*" + r",\s*".join(f'"{w}"' for w in path) + r"\s*[,\])]", sources)
    ]
    assert not untested, f"RUNBOOK.md gives commands no test runs: {untested}"


def test_every_step_of_the_runbook_tables_names_its_test() -> None:
    rows = [
        line
        for line in RUNBOOK.splitlines()
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line) and "tested by" not in line
    ]
    assert len(rows) >= 15
    assert all(re.search(r"\btest_\w+", row) for row in rows), [r for r in rows if "test_" not in r]


def test_the_key_rotation_step_covers_the_worker_and_the_server() -> None:
    """Both long-running processes take a rotated model key on SIGHUP, and the step names both tests."""
    row = next(line for line in RUNBOOK.splitlines() if line.startswith("| rotate the model provider's key"))
    assert "kill -HUP <pid of each remem worker>" in row and "kill -HUP <pid of remem serve>" in row
    assert "test_a_worker_uses_a_rotated_model_key_after_sighup_without_a_restart" in row
    assert "test_a_server_uses_a_rotated_model_key_after_sighup_without_a_restart" in row
    assert "does not read its configuration again on SIGHUP" not in RUNBOOK


def test_every_test_named_with_its_file_is_in_that_file() -> None:
    """``tests/test_x.py::test_y`` names a test of that file, and a bare name after it in the same cell
    (``, test_z``) one of the same file, as the runbook's readers will look for it there."""
    for cell in re.findall(r"`tests/(test_\w+\.py)::(test_\w+)`((?:, `test_\w+`)*)", RUNBOOK):
        path, first, rest = cell
        defined = set(
            re.findall(r"^def (test_\w+)", (ROOT / "tests" / path).read_text(encoding="utf-8"), re.M)
        )
        named = [first, *re.findall(r"`(test_\w+)`", rest)]
        assert set(named) <= defined, f"tests/{path} has no {sorted(set(named) - defined)}"
