"""Prices per model, from configuration (``[remem.prices]``), and the cost of a call.

    [remem.prices."gpt-4o-mini"]
    input = 0.15       # USD (or any currency) per million input tokens
    output = 0.60      # per million output tokens
    cached = 0.075     # per million cached input tokens (optional: charged as input when left out)

A model with no price gets a cost of None and one warning per process, never a guessed number.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from remem.errors import ArgumentTypeError, ConfigError, RememUsageError

__all__ = ["Price", "PriceTable"]

log = logging.getLogger("remem.usage")
_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """Per million tokens: input, output and (optionally) cached input."""

    input: float
    output: float
    cached: float | None = None

    def __post_init__(self) -> None:
        # Refused here, not at the first call's cost: a wrong price would otherwise fail (or price wrong) mid-turn.
        for name in ("input", "output", "cached"):
            value = getattr(self, name)
            if value is None and name == "cached":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(
                    f"a price's {name} is a number >= 0 per million tokens, e.g. Price(input=0.15, "
                    f"output=0.60, cached=0.075){' (or None: charged as input)' if name == 'cached' else ''}; "
                    f"got {value!r}"
                )

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        _check_tokens(input_tokens, output_tokens, cached_tokens)
        return self._cost(input_tokens, output_tokens, cached_tokens)

    def _cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
        cached = min(max(cached_tokens, 0), input_tokens)
        cached_rate = self.input if self.cached is None else self.cached
        return (
            (input_tokens - cached) * self.input + cached * cached_rate + output_tokens * self.output
        ) / _MILLION


def _check_tokens(input_tokens: object, output_tokens: object, cached_tokens: object) -> None:
    # Whole numbers only: a bool is an int to Python but a slip, and a text would fail deep in the sum.
    for name, value in (
        ("input_tokens", input_tokens),
        ("output_tokens", output_tokens),
        ("cached_tokens", cached_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"{name} is a whole number of tokens such as {name}=120; got {value!r}")
        if value < 0:
            raise RememUsageError(f"{name} must be 0 or more; got {value}")


class PriceTable:
    """Model name to :class:`Price`; :meth:`cost` warns once per unpriced model and returns None."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self.prices = dict(prices or {})
        for model, price in self.prices.items():
            if not isinstance(model, str) or not isinstance(price, Price):
                raise ConfigError(
                    "prices map a model name to a Price, e.g. PriceTable({'gpt-4o-mini': Price(0.15, 0.60, "
                    f"0.075)}}); got {model!r}: {price!r}"
                )
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_settings_rows(cls, rows: Iterable[tuple[str, float, float, float | None]]) -> PriceTable:
        """From ``Settings.prices`` (rows of model, input, output, cached)."""
        return cls({model: Price(inp, out, cached) for model, inp, out, cached in rows})

    def price(self, model: str) -> Price | None:
        return self.prices.get(model)

    def cost(self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float | None:
        _check_tokens(input_tokens, output_tokens, cached_tokens)
        return self._cost(model, input_tokens, output_tokens, cached_tokens)

    def _cost(self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int) -> float | None:
        """:meth:`cost` of counts already checked (the meter checks every event's counts first)."""
        price = self.prices.get(model)
        if price is None:
            self._warn(model)
            return None
        return price._cost(input_tokens, output_tokens, cached_tokens)

    def _warn(self, model: str) -> None:
        with self._lock:
            if model in self._warned:
                return
            self._warned.add(model)
        log.warning(
            "model %r has no price, so its calls are recorded with cost null; add it under "
            '[remem.prices."%s"] (input, output, cached per million tokens) in remem.toml',
            model,
            model,
        )
