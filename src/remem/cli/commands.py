"""The list of command modules the ``remem`` group is built from."""

from __future__ import annotations

import click

COMMANDS: list[click.Command] = []
