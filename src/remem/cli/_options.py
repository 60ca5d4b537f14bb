"""Options every command shares, and the one way a command finds its database URL."""

from __future__ import annotations

import click

__all__ = ["api_key_option", "database_url", "db_option", "full_option", "given_api_key", "json_option"]

db_option = click.option(
    "--db",
    "database_url",
    metavar="URL",
    help="Database URL: sqlite:///PATH or postgresql://... (default: REMEM_DATABASE_URL or remem.toml).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
full_option = click.option(
    "--full", is_flag=True, help="Show whole contents and ids (no cut at 80 characters)."
)

_API_KEY = "remem.api_key"


def _keep_api_key(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Kept out of the command's arguments (and so out of anything that prints them): read by given_api_key.
    if value is not None:
        ctx.meta[_API_KEY] = value


api_key_option = click.option(
    "--api-key",
    metavar="KEY",
    expose_value=False,
    callback=_keep_api_key,
    help="The key of the remem serve given as --db http://... (default: REMEM_API_KEY, which other users "
    "cannot read in the process list as they can a command line).",
)


def given_api_key() -> str | None:
    """The key given with --api-key to the running command, if any (never printed)."""
    context = click.get_current_context(silent=True)
    found = None if context is None else context.meta.get(_API_KEY)
    return str(found) if found is not None else None


def database_url(given: str | None, positional: str | None = None) -> str:
    """The URL a command uses: --db, else the older positional URL, else the configured one."""
    if given and positional and given != positional:
        raise click.UsageError("give the database once: --db URL (the URL argument is the same option)")
    if given or positional:
        return str(given or positional)
    from remem.config import load_settings

    return load_settings().database_url
