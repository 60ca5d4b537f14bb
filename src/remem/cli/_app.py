"""The root ``remem`` group and the error handling every command shares."""

from __future__ import annotations

import sys
from typing import Any

import click

from remem.errors import RememError


class _RememGroup(click.Group):
    """Turns remem's errors into a one-line message and an exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RememError as exc:  # each error knows its exit code: 2 usage, 1 runtime
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_RememGroup)
@click.version_option(package_name="remem")
def main() -> None:
    """remem: memory for LangGraph agents that lasts, stays small and can be inspected.

    Settings come from REMEM_* environment variables and an optional remem.toml; `remem config` shows them.
    """


def _register() -> None:
    # Imported here so that each command module can import `main` without a cycle.
    from remem.cli import commands

    for command in commands.COMMANDS:
        main.add_command(command)


_register()
