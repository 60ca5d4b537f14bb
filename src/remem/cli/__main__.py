"""``python -m remem.cli``: the ``remem`` command."""

from remem.cli import main

main()
