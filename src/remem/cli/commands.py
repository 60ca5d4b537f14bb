"""The commands the ``remem`` group is built from, gathered from each command module."""

from __future__ import annotations

import click

from remem.cli import backup, checkpoints, eval, ingest, memory, queue, serve, store, threads, usage

COMMANDS: list[click.Command] = [
    *threads.COMMANDS,
    *memory.COMMANDS,
    *store.COMMANDS,
    *checkpoints.COMMANDS,
    *usage.COMMANDS,
    *serve.COMMANDS,
    *queue.COMMANDS,
    *eval.COMMANDS,
    *backup.COMMANDS,
    *ingest.COMMANDS,
]
