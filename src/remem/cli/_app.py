"""The root ``remem`` group and the error handling every command shares.

No command prints a traceback: remem's errors and the environment's (a file that cannot be read, a
database that refuses) become one ``Error: ...`` line on stderr, secrets masked, with exit code 2 when the
caller can fix the input and 1 otherwise (a thread, file or user that is not there is 1: nothing was wrong
with how the command was typed). Unknown ``REMEM_*`` variables are warned about before any command runs.

Command modules import only click at the top; the libraries a command needs are imported when it runs, so
that ``remem --help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from remem.errors import RememError


def _fail(message: object, code: int) -> NoReturn:
    from remem.cli._render import error_line

    click.echo(f"Error: {error_line(message)}", err=True)
    sys.exit(code)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}; check the path and its permissions"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _RememGroup(click.Group):
    """Turns every error into a one-line message and an exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from remem.config import environment_warnings

        for warning in environment_warnings():
            click.echo(f"Warning: {warning}", err=True)
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise  # click prints these itself, with its own exit codes
        except BrokenPipeError:
            # The reader went away (`remem export T | head -1`): click stops quietly, as unix tools do.
            raise
        except RememError as exc:  # each error knows its exit code (remem.errors)
            _fail(exc, exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except Exception as exc:  # a bug or an environment failure: still one line, never a traceback
            _fail(f"{_describe(exc)} (unexpected; please report it if the cause is not clear)", 1)


@click.group(cls=_RememGroup)
@click.version_option(package_name="remem")
def main() -> None:
    """remem: memory for LangGraph agents that lasts, stays small and can be inspected.

    Settings come from REMEM_* environment variables and an optional remem.toml; `remem config` shows them.
    Every command takes --db URL (default: REMEM_DATABASE_URL); reading commands take --json.
    """


def _register() -> None:
    # Imported here so that each command module can import `main` without a cycle.
    from remem.cli import commands

    for command in commands.COMMANDS:
        main.add_command(command)


_register()
