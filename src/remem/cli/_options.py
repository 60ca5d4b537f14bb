"""Options more than one command takes."""

from __future__ import annotations

import click

db_option = click.option(
    "--db", "database_url", metavar="URL", help="Database URL (default: REMEM_DATABASE_URL)."
)
