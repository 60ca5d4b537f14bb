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
