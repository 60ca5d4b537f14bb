"""Deterministic fakes of models, shared by remem's tests and benchmarks (and usable by yours).

Only models are faked; databases are always real.

- ``FakeEmbedder``: a seeded embedder. Each word maps to a fixed random unit vector (seeded by the word and
  ``seed``); a text is the normalised sum of its words' vectors, so texts that share words are similar and the
  same text always gives the same vector, in any process.
- ``ScriptedJSONChatModel``: a chat model that answers with the next of a list of scripted strings (typically
  JSON) and records every prompt it was sent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

__all__ = ["FakeEmbedder", "ScriptedJSONChatModel"]

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


class ScriptedJSONChatModel(BaseChatModel):
    """Answers each call with the next scripted reply; a callable reply is given the prompt messages.

    A reply that is an ``Exception`` instance is raised instead (to test retries). ``prompts`` records
    what every call was sent.
    """

    replies: list[Any]
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def __init__(self, replies: Sequence[str | Exception | Callable[[list[BaseMessage]], str]], **kw: Any):
        super().__init__(replies=list(replies), prompts=[], **kw)  # type: ignore[call-arg]

    @property
    def _llm_type(self) -> str:
        return "remem-scripted-json"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.prompts.append(list(messages))
        if not self.replies:
            raise RuntimeError("ScriptedJSONChatModel ran out of scripted replies")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        text = reply(messages) if callable(reply) else reply
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])
