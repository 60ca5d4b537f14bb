"""Deterministic fakes of models, shared by remem's tests and benchmarks (and usable by yours).

Only models are faked; databases are always real.

- ``FakeEmbedder``: a seeded embedder. Each word maps to a fixed random unit vector (seeded by the word and
  ``seed``); a text is the normalised sum of its words' vectors, so texts that share words are similar and the
  same text always gives the same vector, in any process.
- ``ScriptedChatModel`` (from :mod:`remem.models`, where ``remem demo`` uses it too): a chat model that answers
  from a script (texts, messages, exceptions to raise, or functions of the prompt) and records every call.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from remem.models import ScriptedChatModel

__all__ = ["FakeEmbedder", "ScriptedChatModel"]

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeEmbedder(Embeddings):
    """A deterministic, seeded bag-of-words embedder (no model, no network)."""

    def __init__(self, dims: int = 64, *, seed: int = 0) -> None:
        self.dims = dims
        self.seed = seed
        self.calls = 0  # embed calls made
        self.texts_embedded = 0  # texts embedded in all
        self._words: dict[str, npt.NDArray[np.float32]] = {}

    def _word_vector(self, word: str) -> npt.NDArray[np.float32]:
        cached = self._words.get(word)
        if cached is not None:
            return cached
        if len(self._words) > 100_000:
            self._words.clear()
        digest = hashlib.blake2b(f"{self.seed}:{word}".encode("utf-8", "surrogatepass"), digest_size=8)
        rng = np.random.default_rng(int.from_bytes(digest.digest(), "little"))
        vector = rng.standard_normal(self.dims).astype(np.float32)
        self._words[word] = vector
        return vector

    def embed_array(self, texts: list[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            words = [w.lower() for w in _WORD.findall(text)] or [text]
            for word in words:
                out[i] += self._word_vector(word)
            norm = float(np.linalg.norm(out[i]))
            if norm > 0:
                out[i] /= norm
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]
