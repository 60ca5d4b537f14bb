"""The ``remem`` command: thin commands over the public API.

Each command group lives in its own module and is registered here. Library errors become a clean
message and an exit code (1: runtime, 2: usage), never a traceback.
"""

from __future__ import annotations

from remem.cli._app import main

__all__ = ["main"]
