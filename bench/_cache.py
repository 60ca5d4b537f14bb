"""Embeddings kept on disk between benchmark runs (BEAM's long turns take minutes to embed).

Only numpy and ``remem.embeddings``, so that ``bench/cards.py --before`` can use it with an older checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class DiskCache:
    """An embedder wrapper that keeps every embedding it computed in ``folder/name.npz`` (keyed by the
    text's SHA-256, no text stored), so a second run of a long set (BEAM) embeds nothing again."""

    def __init__(self, inner: Any, folder: Path, name: str) -> None:
        from remem.embeddings import text_hash

        self.inner, self.dims, self._hash = inner, inner.dims, text_hash
        self.path = folder / f"{name}.npz"
        self._rows: dict[bytes, Any] = {}
        if self.path.is_file():
            with np.load(self.path) as saved:
                self._rows = dict(zip((bytes(k) for k in saved["keys"]), saved["rows"], strict=True))
        self._saved = len(self._rows)

    def embed_array(self, texts: list[str]) -> Any:
        keys = [self._hash(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._rows}
        if missing:
            from remem.embeddings import embed_array

            self._rows.update(zip(missing, embed_array(self.inner, list(missing.values())), strict=True))
            if len(self._rows) - self._saved >= 2000:
                self.save()
        return np.vstack([self._rows[k] for k in keys]) if keys else np.zeros((0, self.dims), np.float32)

    def save(self) -> None:
        if len(self._rows) == self._saved:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._rows), dtype="S32")
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, rows=np.vstack(list(self._rows.values())))
        tmp.replace(self.path)
        self._saved = len(self._rows)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]
