"""Pure logic the stores share: validation, encoding, filters, indexed text, fusion. No I/O here."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from langgraph.store.base import (
    IndexConfig,
    SearchItem,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
)

from remem.embeddings import EmbedderIdentity, embedder_identity
from remem.errors import ConfigError, InvalidFilterError, NamespaceError, RememUsageError

SearchMode = Literal["hybrid", "keyword", "vector"]
SEARCH_MODES: tuple[str, ...] = ("hybrid", "keyword", "vector")
SEP = "."  # LangGraph forbids "." in labels, so joining with it is unambiguous.
MAX_LABEL = 1024
MAX_KEY = 4096
RRF_K = 60
CHUNK = 500  # ids per statement where a statement lists them
_SAFE_FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_EXACT_INT = 2**53  # integers a filter may compare in SQL: exact as an int64 and as a double
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _check_text(kind: str, text: object, limit: int) -> str:
    if not isinstance(text, str):
        raise RememUsageError(f"{kind} must be a string, got {type(text).__name__}; pass a str")
    if not text:
        raise RememUsageError(f"{kind} must not be empty")
    if "\x00" in text:
        raise RememUsageError(f"{kind} must not contain NUL bytes; remove them: {text!r:.80}")
    if len(text) > limit:
        raise RememUsageError(f"{kind} is {len(text)} characters; the most is {limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RememUsageError(f"{kind} must be valid Unicode (no lone surrogates): {text!r:.80}") from None
    return text


def validate_namespace(namespace: Sequence[str], *, allow_empty: bool = False) -> None:
    """Raise if a namespace label could not be stored faithfully; labels are then only ever bound values."""
    if not isinstance(namespace, tuple):
        raise NamespaceError(f"a namespace must be a tuple of strings, got {type(namespace).__name__}")
    if not namespace and not allow_empty:
        raise NamespaceError("Namespace cannot be empty.")
    for label in namespace:
        try:
            _check_text("a namespace label", label, MAX_LABEL)
        except RememUsageError as exc:
            raise NamespaceError(f"{exc} (in namespace {namespace!r:.120})") from None
        if SEP in label:
            raise NamespaceError(f"namespace labels cannot contain periods ('.'): {label!r:.80}")


def validate_key(key: object) -> str:
    return _check_text("an item key", key, MAX_KEY)


def ns_path(namespace: Sequence[str]) -> str:
    return SEP.join(namespace)


def ns_tuple(path: str) -> tuple[str, ...]:
    return tuple(path.split(SEP))


def prefix_bounds(prefix: Sequence[str]) -> tuple[str, str, str] | None:
    """(exact, low, high) so that a path is under ``prefix`` iff path == exact or low < path < high."""
    if not prefix:
        return None
    exact = ns_path(prefix)
    return exact, exact + SEP, exact + chr(ord(SEP) + 1)


def dumps(value: Mapping[str, Any]) -> str:
    """Exact JSON text of a value (NUL and control characters escaped). Lone surrogates are refused:
    they are not Unicode text, and JSON would turn a pair of them into a different string."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RememUsageError(
            "an item value must be valid Unicode text (it holds a lone surrogate)"
        ) from None
    except (TypeError, ValueError) as exc:
        raise RememUsageError(f"an item value must be JSON-serialisable (finite numbers): {exc}") from None
    except RecursionError:
        raise too_deep() from None
    return text


def too_deep() -> RememUsageError:
    """The error for a value nested deeper than Python's JSON reaches."""
    return RememUsageError(
        "an item value nests too deep to store (JSON in Python reaches about 1,000 levels): "
        "flatten it, e.g. keep the deep part as a JSON text in one field"
    )


def loads(text: str | bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(text)
    return value


def clean_text(text: str) -> str:
    """Text safe for any database text column: no NUL, no lone surrogates."""
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def sanitized(value: Any) -> Any:
    """A copy with every string and key ``clean_text``-ed (for Postgres jsonb, which refuses NUL)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, Mapping):
        return {sanitized(str(k)): sanitized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitized(v) for v in value]
    return value


def to_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


# ---------------------------------------------------------------- filters


def validate_filter(filter: Mapping[str, Any] | None) -> dict[str, Any]:
    if filter is None:
        return {}
    if not isinstance(filter, Mapping):
        raise InvalidFilterError(f"a filter must be a mapping of field to value, got {type(filter).__name__}")
    for key, value in filter.items():
        _check_filter_key(key)
        _check_operators(key, value)
    return dict(filter)


def _check_operators(key: str, value: Any) -> None:
    if isinstance(value, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in value):
            for op in value:
                if op not in _OPERATORS:
                    raise InvalidFilterError(
                        f"unknown filter operator {op!r:.40} on {key!r:.40}; use one of {', '.join(_OPERATORS)}"
                    )
        else:
            for v in value.values():
                _check_operators(key, v)
    elif isinstance(value, list | tuple):
        for v in value:
            _check_operators(key, v)


def _check_filter_key(key: object) -> None:
    # Any string is a valid key (values may hold any key); only keys matching _SAFE_FILTER_KEY are ever
    # placed in SQL (as bound JSON paths); the others are matched in Python.
    if not isinstance(key, str):
        raise InvalidFilterError(f"a filter key must be a string, got {type(key).__name__}")
    if len(key) > 10_000:
        raise InvalidFilterError(f"a filter key is {len(key)} characters; the most is 10000")


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _apply_operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    left, right = _as_float(value), _as_float(operand)
    if left is None or right is None:
        return False
    if operator == "$gt":
        return left > right
    if operator == "$gte":
        return left >= right
    if operator == "$lt":
        return left < right
    return left <= right


def compare(item_value: Any, filter_value: Any) -> bool:
    """LangGraph's InMemoryStore filter semantics (a non-numeric value never matches $gt/$lt)."""
    if isinstance(filter_value, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in filter_value):
            return all(_apply_operator(item_value, k, v) for k, v in filter_value.items())
        if not isinstance(item_value, Mapping):
            return False
        return all(compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(filter_value)
            and all(compare(a, b) for a, b in zip(item_value, filter_value, strict=True))
        )
    return bool(item_value == filter_value)


_MISSING = object()


def value_at(value: Mapping[str, Any], key: str) -> Any:
    """The value a filter key names: the top-level key itself when the item has it (InMemoryStore's way),
    else a dotted path into nested objects (``"user.access-level"``, as LangGraph's SQL stores read it)."""
    found = value.get(key, _MISSING)
    if found is not _MISSING or "." not in key:
        return None if found is _MISSING else found
    current: Any = value
    for part in key.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return None
        current = current[part]
    return current


def matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    return all(compare(value_at(value, k), v) for k, v in filter.items())


@dataclass(frozen=True)
class Pushdown:
    """Filter conditions a database can check exactly: (key, kind, value) with kind "str" or "num"."""

    conditions: tuple[tuple[str, str, Any], ...]
    exact: bool  # True when these conditions are the whole filter (limit/offset may go to SQL)


def plan_filter(filter: Mapping[str, Any]) -> Pushdown:
    conditions: list[tuple[str, str, Any]] = []
    exact = True
    for key, value in filter.items():
        if isinstance(value, Mapping) and set(value) == {"$eq"}:
            value = value["$eq"]
        if not _SAFE_FILTER_KEY.match(key):
            exact = False
        elif isinstance(value, str) and value == clean_text(value) and "\ufffd" not in value:
            conditions.append((key, "str", value))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _EXACT_INT:
            conditions.append((key, "num", value))
        # A float is matched in Python, as InMemoryStore does: the databases' numbers differ from
        # Python's at the edges (PostgreSQL casts a float8 to numeric with 15 digits, so 0.30000000000000004
        # matched 0.3; a subnormal like 5e-324 was lost), and an integer past 64 bits cannot be bound.
        else:
            exact = False
    return Pushdown(tuple(conditions), exact)


# ---------------------------------------------------------------- indexing


@dataclass
class IndexPlan:
    """The validated ``index`` config: which fields are embedded and how many dims, and which embedder
    makes the vectors (``identity``, what the store records: :mod:`remem.store._embedder`)."""

    dims: int
    embed: Any
    fields: list[tuple[str, Any]] = field(default_factory=list)
    distance: str = "cosine"  # index["distance_type"]: cosine, inner_product or l2

    @property
    def identity(self) -> EmbedderIdentity:
        """The embedder's identity (read each time: an ``AutoEmbedder`` names its model once it chose)."""
        return embedder_identity(self.embed, self.dims)

    @classmethod
    def from_config(cls, index: IndexConfig | Mapping[str, Any] | None) -> IndexPlan | None:
        if not index:
            return None
        from langgraph.store.base import ensure_embeddings

        dims = index.get("dims")
        if not isinstance(dims, int) or dims <= 0:
            raise ConfigError(
                "index['dims'] must be a positive int, the embedder's output size (384 for MiniLM)"
            )
        raw_embed = index.get("embed")
        if raw_embed is None:
            raise ConfigError(
                "index['embed'] is required: an Embeddings object, a function, or 'provider:model'"
            )
        embed = raw_embed if hasattr(raw_embed, "embed_documents") else ensure_embeddings(raw_embed)
        paths = list(index.get("fields") or dict(index).get("text_fields") or ["$"])
        distance = str(dict(index).get("distance_type") or "cosine")
        if distance not in ("cosine", "inner_product", "l2"):
            raise ConfigError(
                f"index['distance_type'] {distance!r:.40} is not supported; use 'cosine', 'inner_product' or 'l2'"
            )
        return cls(dims=dims, embed=embed, fields=_parsed_fields(paths), distance=distance)


def texts_for(value: Mapping[str, Any], fields: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(path, text) pairs to embed for a value, LangGraph's way (a list field gives one text per element)."""
    out: list[tuple[str, str]] = []
    for path, tokens in fields:
        try:
            texts = get_text_at_path(value, tokens)
        except RecursionError:
            raise too_deep() from None
        if len(texts) > 1:
            out.extend((f"{path}.{i}", t) for i, t in enumerate(texts))
        elif texts:
            out.append((path, texts[0]))
    return [(p, t) for p, t in out if isinstance(t, str) and t]


KEYWORD_ONLY = "keyword:"
"""The prefix of an index path whose text the keyword index holds but no vector does (``"keyword:speaker"``).

An item's vector score is its best field's similarity, so a short field embedded on its own (a speaker's
name, a date) becomes the item's best vector for any question that names it, however little the rest of
the item answers it: measured on REALTALK with MiniLM, indexing a turn's speaker and date as a second
vector took vector recall@5 from 42.4 to 15.6, while the same words in the keyword document alone raised
keyword recall@5 from 52.3 to 57.3 (``bench/retrieval.py --indexings``). A stock store reads such a path as
a key of that name, which no item has: nothing more is indexed there."""


def keyword_only(path: str) -> str:
    """``path`` as an index path that only the keyword index holds (see ``KEYWORD_ONLY``)."""
    return path if path.startswith(KEYWORD_ONLY) else KEYWORD_ONLY + path


def _parsed_fields(paths: Iterable[str]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for p in paths:
        bare = p.removeprefix(KEYWORD_ONLY)
        out.append((p, bare if bare == "$" else tokenize_path(bare)))
    return out


def embedded(fields: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The index fields that get a vector (all but the keyword-only ones)."""
    return [f for f in fields if not f[0].startswith(KEYWORD_ONLY)]


def index_fields(plan: IndexPlan | None, op_index: Any) -> list[tuple[str, Any]]:
    if op_index is False:
        return []
    if op_index is None:
        return plan.fields if plan else [("$", "$")]
    return _parsed_fields(op_index)


def keyword_text(value: Mapping[str, Any], fields: Sequence[tuple[str, Any]]) -> str:
    """The text the keyword index holds for an item: its indexed fields, or all its strings.

    LangGraph's paths give ``$`` and a dict or list as JSON, where a line break is the two characters
    \\n: the ``n`` would glue onto the next word. So when a text holds a backslash, the fields are read
    again from a copy whose strings have their control characters (word breaks anyway) as spaces."""
    fields = fields or [("$", "$")]
    texts = [t for _, t in texts_for(value, fields)]
    if any("\\" in t for t in texts):
        texts = [t for _, t in texts_for(_spaced(value), fields)]
    return clean_text(" ".join(texts))


_CONTROL = re.compile(r"[\x00-\x1f]")


def _spaced(value: Any) -> Any:
    """A copy of a JSON value whose strings and keys have their control characters as spaces (a key
    that would then equal another is kept as it is)."""
    if isinstance(value, str):
        return _CONTROL.sub(" ", value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            spaced = _spaced(key) if isinstance(key, str) else key
            out[key if spaced in value or spaced in out else spaced] = _spaced(item)
        return out
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for item in value:  # a loop, not a comprehension: one stack frame per level of nesting
            items.append(_spaced(item))
        return items
    return value


@dataclass(frozen=True)
class KeywordAttempt:
    """One keyword query to try: OR (or AND) of ``terms``; ``newest``: rank only about that many of the
    newest matching items (None: all); ``partial``: accept fewer results than asked for."""

    terms: tuple[str, ...]
    every: bool = False
    newest: int | None = None
    partial: bool = True


def plan_keyword(
    terms: Sequence[str], df: Mapping[str, int] | None, rows: int, budget: int
) -> list[KeywordAttempt]:
    """The keyword queries to try, in order, so that no query ranks many more than ``budget`` matches.

    Ranking costs a few microseconds a match (BM25), so on a large index only the rarest terms are
    kept while their matches fit the budget: a term in a large share of the items has an IDF near zero and
    moves no ranking. When even the rarest term matches too many items, all terms are required (AND);
    failing that, the newest matches (about ``budget`` of them) are ranked. An intersection expected to be
    larger than ``budget`` is ranked among the newest items too. ``df`` None: rank everything.
    """
    if df is None:
        return [KeywordAttempt(tuple(terms))]
    ordered = sorted((t for t in terms if df.get(t, 0) > 0), key=lambda t: df[t])
    if not ordered:
        return []
    picked, total = [ordered[0]], df[ordered[0]]
    for term in ordered[1:]:
        if total + df[term] > budget:
            break
        picked.append(term)
        total += df[term]
    if total <= budget:
        return [KeywordAttempt(tuple(picked))]
    attempts = []
    if len(ordered) > 1:
        # items holding every term, about rows * product(df / rows) if the terms were independent: a
        # large intersection is ranked within the newest items only, as a single common term is
        # (each of them costs one row per term to rank)
        cost = len(ordered) * max(rows, 1) * math.prod(min(df[t] / max(rows, 1), 1.0) for t in ordered)
        within = None if cost <= budget else max(budget // len(ordered), int(budget * max(rows, 1) / cost))
        attempts.append(KeywordAttempt(tuple(ordered), every=True, newest=within, partial=False))
    window = max(budget, budget * max(rows, 1) // total)
    attempts.append(KeywordAttempt(tuple(picked), newest=window, partial=False))
    attempts.append(KeywordAttempt(tuple(picked)))
    return attempts


# ---------------------------------------------------------------- ttl, fusion, results


def expiry(ttl_minutes: float | None, now: float | None = None) -> float | None:
    if ttl_minutes is None:
        return None
    return (now if now is not None else time.time()) + 60.0 * float(ttl_minutes)


def resolve_ttl(config: TTLConfig | None, ttl: Any) -> float | None:
    from langgraph.store.base import NOT_PROVIDED

    if ttl is NOT_PROVIDED:
        return (config or {}).get("default_ttl")
    return None if ttl is None else float(ttl)


def rrf(rankings: Iterable[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal-rank fusion: each id scores the sum of 1/(k + rank) over the lists it appears in."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item_id in enumerate(ranking, start=1):
            scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (k + rank)
    return scores


class ScoredItem(SearchItem):
    """A search result with its fused ``score`` and the per-signal scores it came from.

    ``scores`` holds ``keyword`` (BM25, higher is better), ``vector`` (cosine similarity) and
    their ranks where the item was found by that signal; ``mode`` is the search mode that produced it.
    """

    __slots__ = ("mode", "scores")

    def __init__(self, *args: Any, mode: str = "hybrid", scores: dict[str, float] | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.mode = mode
        self.scores = scores or {}

    def dict(self) -> dict[str, Any]:
        out: dict[str, Any] = super().dict()
        out["mode"] = self.mode
        out["scores"] = dict(self.scores)
        return out
