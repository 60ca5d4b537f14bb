"""``remem backup``: a consistent copy of the embedded database while it is in use."""

from __future__ import annotations

from pathlib import Path

import click

from remem.cli._options import db_option

__all__ = ["COMMANDS", "backup_command"]


@click.command("backup")
@click.option(
    "--to",
    "target",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    metavar="FILE",
    help="The new file to write (never overwritten).",
)
@db_option
def backup_command(target: Path, database_url: str | None) -> None:
    """Copy the SQLite database to FILE while apps and workers keep using it (SQLite's online backup).

    The copy holds every transaction committed before it ended. To restore: stop the apps and workers,
    move the copy in place of the database (and remove its -wal and -shm files), start again. PostgreSQL:
    use pg_dump (see RUNBOOK.md).

    Example: remem backup --db sqlite:///.remem/remem.db --to backups/remem-2026-12-01.db
    """
    from remem._backup import backup_sqlite
    from remem._url import display_url, parse_database_url
    from remem.cli._options import database_url as configured
    from remem.cli._render import say
    from remem.errors import ConfigError

    url = configured(database_url)
    parsed = parse_database_url(url)
    if parsed.kind != "sqlite" or parsed.target == ":memory:":
        raise ConfigError(
            f"remem backup copies a SQLite file; {display_url(url)} is not one. PostgreSQL: "
            "pg_dump -Fc -f remem.dump DBNAME (restore with pg_restore -d NEWDB remem.dump; see RUNBOOK.md)"
        )
    pages = backup_sqlite(parsed.sqlite_path, target)
    say(f"backed up {display_url(url)} to {target} ({pages} pages)")


COMMANDS: list[click.Command] = [backup_command]
