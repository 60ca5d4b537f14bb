"""Deterministic fakes of models, shared by remem's tests and benchmarks (and usable by yours).

Only models are faked; databases are always real.

- ``FakeEmbedder`` (:class:`remem.embeddings.HashingEmbedder`, the same class; ``embedder="fake"`` uses it): a
  seeded embedder. Each word maps to a fixed random unit vector (seeded by the word and
  ``seed``); a text is the normalised sum of its words' vectors, so texts that share words are similar and the
  same text always gives the same vector, in any process.
- ``ScriptedChatModel`` (from :mod:`remem.models`, where ``remem demo`` uses it too): a chat model that answers
  from a script (texts, messages, exceptions to raise, or functions of the prompt) and records every call.
"""

from __future__ import annotations

from remem.embeddings import HashingEmbedder
from remem.models import ScriptedChatModel

__all__ = ["FakeEmbedder", "ScriptedChatModel"]

# The library's hashing embedder, under the name remem's tests and users know it by.
FakeEmbedder = HashingEmbedder
