"""Evaluation: a seeded generator of long conversations, and how well remem retrieves from them.

    from remem.eval import generate, evaluate_retrieval, markdown
    dataset = generate(seed=21, per_language=2)            # English, French, Chinese, Korean
    report = evaluate_retrieval(dataset, url="sqlite:///eval.db")
    print(markdown(report))

The layout of a dataset (JSON, or its JSONL line form; LoCoMo's own layout is read too) is described in
:mod:`remem.eval._dataset`. ``remem eval generate`` and ``remem eval retrieval`` are the commands.
"""

from __future__ import annotations

from remem.eval._dataset import (
    CATEGORIES,
    FORMAT,
    LANGUAGE_CODES,
    dump_jsonl,
    generate,
    load_dataset,
    save_dataset,
)
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
    "Comparison",
    "RetrievalReport",
    "compare",
    "dump_jsonl",
    "evaluate_retrieval",
    "generate",
    "load_dataset",
    "markdown",
    "paired_bootstrap",
    "save_dataset",
    "write_chart",
]
