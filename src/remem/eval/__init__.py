"""Evaluation: a seeded generator of long conversations, and how well remem retrieves from them.

    from remem.eval import generate, evaluate_retrieval, markdown
    dataset = generate(seed=21, per_language=2)            # English, French, Chinese, Korean
    report = evaluate_retrieval(dataset, url="sqlite:///eval.db")
    print(markdown(report))
    print(compaction_markdown(evaluate_compaction(dataset)))   # tokens per turn, facts kept, per strategy

The layout of a dataset (JSON, or its JSONL line form; LoCoMo's own layout is read too) is described in
:mod:`remem.eval._dataset`. ``remem eval generate``, ``remem eval retrieval`` and ``remem eval compaction`` are the commands.
"""

from __future__ import annotations

from remem.eval._compaction import (
    CompactionReport,
    compaction_markdown,
    evaluate_compaction,
    write_compaction_chart,
)
from remem.eval._dataset import (
    CATEGORIES,
    FORMAT,
    LANGUAGE_CODES,
    dump_jsonl,
    generate,
    load_dataset,
    save_dataset,
    session_date,
)
from remem.eval._qa import QAReport, evaluate_qa, qa_markdown, save_calls
from remem.eval._replay import OriginalTurn, ReplayReport, read_transcript, replay, replay_markdown
from remem.eval._retrieval import (
    BUDGETS,
    KS,
    MODES,
    Comparison,
    RetrievalReport,
    compare,
    evaluate_retrieval,
    markdown,
    paired_bootstrap,
    write_chart,
)

__all__ = [
    "BUDGETS",
    "CATEGORIES",
    "FORMAT",
    "KS",
    "LANGUAGE_CODES",
    "MODES",
    "CompactionReport",
    "Comparison",
    "OriginalTurn",
    "QAReport",
    "ReplayReport",
    "RetrievalReport",
    "compaction_markdown",
    "compare",
    "dump_jsonl",
    "evaluate_compaction",
    "evaluate_qa",
    "evaluate_retrieval",
    "generate",
    "load_dataset",
    "markdown",
    "paired_bootstrap",
    "qa_markdown",
    "read_transcript",
    "replay",
    "replay_markdown",
    "save_calls",
    "save_dataset",
    "session_date",
    "write_chart",
    "write_compaction_chart",
]
