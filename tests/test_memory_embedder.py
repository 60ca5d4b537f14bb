"""``Memory.from_url(url, embedder=...)``: the embedder a memory indexes with, by name or as an object."""

from __future__ import annotations

from pathlib import Path

import pytest

from remem import Memory, load_settings
from remem.testing import FakeEmbedder


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_the_embedder_given_is_the_one_that_indexes(where: str, tmp_path: Path) -> None:
    url = "memory://" if where == "memory" else f"sqlite:///{tmp_path / 'm.db'}"
    settings = load_settings(environ={}, config_file=None)  # embedder: minilm, which is not used below
    embedder = FakeEmbedder(dims=32)
    with Memory.from_url(url, settings=settings, embedder=embedder) as memory:
        memory.thread("t", user_id="u").add_messages([{"role": "user", "content": "my cat is called Miso"}])
        assert embedder.texts_embedded >= 1
        assert memory.store.index_config is not None and memory.store.index_config["dims"] == 32
    with Memory.from_url("memory://", settings=settings, embedder="fake") as memory:
        assert memory.store.index_config["dims"] == FakeEmbedder().dims  # type: ignore[index]
