"""The guide's Maya scenario: after compaction the final answer's model input still says who Maya is,
which workflow she migrates and which step fails. Runs the example itself, on every backend."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from remem.memory import is_card_message
from remem.models import ScriptedChatModel

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "maya_context_card.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("maya_context_card", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_maya_final_answer_sees_who_what_and_which_step(any_db_url: str) -> None:
    example = _example()
    model = ScriptedChatModel(default=example._answer_from_prompt)
    final_answer, card, _ = example.run(any_db_url, model)
    final_input = model.calls[-1]
    assert final_input[0].type == "system"  # the system prompt is kept, the card is not put there
    card_message = final_input[1]
    assert is_card_message(card_message) and card_message.type == "human"
    # Who Maya is and the workflow come from the card (the raw tail no longer holds the first turn).
    assert "Maya" in card_message.text and "invoice reconciliation" in card_message.text
    seen = "\n".join(m.text for m in final_input)
    assert "ledger enrichment" in seen
    assert "What workflow am I migrating" in final_input[-1].text
    assert not any("I'm Maya" in m.text for m in final_input[2:])  # the first turn was compacted away
    assert final_answer == (
        "You're Maya, migrating your nightly invoice reconciliation workflow, "
        "and the failing step is ledger enrichment."
    )
    assert card.startswith("<context_card>")


def test_the_example_runs_as_a_script(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEM_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "<context_card>" in done.stdout
    assert "You're Maya" in done.stdout and "ledger enrichment" in done.stdout
