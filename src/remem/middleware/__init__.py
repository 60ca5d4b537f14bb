"""Prompt compaction with remem context cards: a LangChain v1 middleware and a LangGraph node."""

from remem.middleware._compaction import PATTERNS, CardOptions, Pattern, RecallCardOptions
from remem.middleware.budget import BudgetMiddleware
from remem.middleware.card import ContextCardMiddleware, ContextCardNode

__all__ = [
    "PATTERNS",
    "BudgetMiddleware",
    "CardOptions",
    "ContextCardMiddleware",
    "ContextCardNode",
    "Pattern",
    "RecallCardOptions",
]
