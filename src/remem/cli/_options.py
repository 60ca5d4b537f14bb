"""Options every command shares, and the one way a command finds its database URL."""

from __future__ import annotations

import click

__all__ = ["database_url", "db_option", "full_option", "json_option"]

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


def database_url(given: str | None, positional: str | None = None) -> str:
    """The URL a command uses: --db, else the older positional URL, else the configured one."""
    if given and positional and given != positional:
        raise click.UsageError("give the database once: --db URL (the URL argument is the same option)")
    if given or positional:
        return str(given or positional)
    from remem.config import load_settings

    return load_settings().database_url
