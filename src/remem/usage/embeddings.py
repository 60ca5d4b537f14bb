"""An embedder that records each batch in the ledger (kind ``embedder``); a wrapper, nothing else changes."""

from __future__ import annotations

import time
from typing import Any

from langchain_core.embeddings import Embeddings

from remem.usage.meter import Meter

__all__ = ["MeteredEmbedder"]


class MeteredEmbedder(Embeddings):
    """Wraps any LangChain-style embedder: ``MeteredEmbedder(embedder, meter, model="minilm")``.

    ``embed_array`` is passed through when the inner embedder has it (remem's own do), so remem's fast
    NumPy path is kept. Tokens are counted (embedders report none); the cost follows ``[remem.prices]``.
    """

    def __init__(self, inner: Any, meter: Meter, *, model: str | None = None, **fields: Any) -> None:
        self.inner = inner
        self.meter = meter
        self.model = model or type(inner).__name__
        self.fields = fields  # thread_id / user_id to attribute the batches to, when known

    def _record(self, texts: list[str], started: float) -> None:
        if texts:
            self.meter.record_texts("embedder", self.model, texts, started=started, **self.fields)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        started = time.perf_counter()
        vectors: list[list[float]] = self.inner.embed_documents(texts)
        self._record(texts, started)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        started = time.perf_counter()
        vector: list[float] = self.inner.embed_query(text)
        self._record([text], started)
        return vector

    def embed_array(self, texts: list[str]) -> Any:
        if not hasattr(self.inner, "embed_array"):
            import numpy as np

            return np.asarray(self.embed_documents(texts), dtype=np.float32)
        started = time.perf_counter()
        matrix = self.inner.embed_array(texts)
        self._record(texts, started)
        return matrix
