"""Deterministic fakes of models, shared by remem's tests and benchmarks (and usable by yours).

Only models are faked; databases are always real.

- ``FakeEmbedder`` (:class:`remem.embeddings.HashingEmbedder`, the same class; ``embedder="fake"`` uses it): a
  seeded embedder. Each word maps to a fixed random unit vector (seeded by the word and
  ``seed``); a text is the normalised sum of its words' vectors, so texts that share words are similar and the
  same text always gives the same vector, in any process.
- ``ScriptedChatModel`` (from :mod:`remem.models`, where ``remem demo`` uses it too): a chat model that answers
  from a script (texts, messages, exceptions to raise, or functions of the prompt) and records every call.
- ``offline_settings``: settings that read no environment variable and no file, with the seeded embedder, so a
  test sees the defaults whatever the machine it runs on has configured.
"""

from __future__ import annotations

from typing import Any

from remem.config import Settings, load_settings
from remem.embeddings import HashingEmbedder
from remem.models import ScriptedChatModel

__all__ = ["FakeEmbedder", "ScriptedChatModel", "offline_settings"]

# The library's hashing embedder, under the name remem's tests and users know it by.
FakeEmbedder = HashingEmbedder


def offline_settings(**overrides: Any) -> Settings:
    """The defaults, with the seeded embedder and ``overrides``; no environment variable or file is read."""
    return load_settings(environ={}, config_file=None, **{"embedder": "fake", **overrides})
