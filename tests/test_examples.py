"""Every program under examples/ runs, offline, and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"
# Examples that need arguments get them here; the others run as they are.
ARGS = {"persistent_chat.py": ["--db", "memory://", "--thread", "t", "hello"]}


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(example: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example), *ARGS.get(example, [])],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "an example should show what it did"
