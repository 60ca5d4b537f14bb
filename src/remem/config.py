"""One settings object, read from ``REMEM_*`` environment variables and an optional ``remem.toml``.

Precedence: keyword arguments, then the environment, then the TOML file, then the defaults. The TOML file
is ``REMEM_CONFIG`` when set, else ``remem.toml`` in the working directory, else the ``[tool.remem]`` table
of ``pyproject.toml`` there: the first found is read, whole, and the others are not merged in (as ruff
reads ``ruff.toml`` before ``pyproject.toml``).
Secrets (API keys) are read from the environment only; a key in the TOML file is an error,
so that no key ends up committed next to the code. ``REMEM_LLM_API_KEY_FILE`` (``<variable>_FILE`` of
any secret) names a file that holds the secret instead (a mounted secret), read at every load: rotate the
key by rewriting the file, and a long-running ``remem worker`` takes it on SIGHUP.

The settings are checked whole when they are built: a wrong type, an unknown name (with the closest
known one), a database URL remem cannot open, an endpoint without ``http://`` or ``https://``, or sizes
the strategy cannot work with are a :class:`~remem.errors.ConfigError` naming the setting, its variable
and what to do, before anything runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from remem.errors import ConfigError

__all__ = ["STRATEGY_NAMES", "Settings", "check_summary_sizes", "environment_warnings", "load_settings"]

STRATEGY_NAMES = ("filter", "delete", "trim", "summary")
TOKEN_COUNTERS = ("approximate", "o200k", "cl100k")
EMBEDDERS = ("auto", "minilm", "e5", "fake")
EMBED_TURNS = ("inline", "queue")
BUDGET_ACTIONS = ("error", "refuse", "approve", "compact")  # remem.usage._breach says what each does
DEFAULT_CONFIG_FILE = "remem.toml"
PYPROJECT_FILE = "pyproject.toml"  # its [tool.remem] table, read when there is no remem.toml
# REMEM_* names that are not settings: the config file's path, the key of a `remem serve` that the CLI reads
# (--db http://...), and the project's own test and benchmark knobs.
_OTHER_ENV_NAMES = ("REMEM_CONFIG", "REMEM_API_KEY")
_OTHER_ENV_PREFIXES = ("REMEM_TEST_", "REMEM_BENCH_")


def _setting(default: Any, help: str, *, choices: tuple[str, ...] = (), secret: bool = False) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices, "secret": secret})


@dataclass(frozen=True)
class Settings:
    """Every setting remem reads. Build one with :func:`load_settings` (which reads the environment and the
    file); a ``Settings(...)`` built directly takes only its arguments and the defaults, checked the same way."""

    database_url: str = _setting(
        "sqlite:///.remem/remem.db", "where threads live: memory://, sqlite:///PATH or postgresql://..."
    )
    llm_model: str | None = _setting(None, "chat model name at an OpenAI-compatible endpoint")
    llm_base_url: str | None = _setting(None, "OpenAI-compatible base URL (Ollama, vLLM, llama.cpp server)")
    llm_api_key: str | None = _setting(
        None, "API key for the endpoint (environment only; OPENAI_API_KEY when unset)", secret=True
    )
    llm_timeout: float = _setting(60.0, "seconds before a model call is abandoned")
    llm_max_retries: int = _setting(2, "retries of a failed model call")
    llm_temperature: float = _setting(0.0, "sampling temperature")
    strategy: str = _setting("summary", "memory strategy applied each turn", choices=STRATEGY_NAMES)
    keep_messages: int = _setting(6, "messages the filter/delete/summary strategies keep")
    max_tokens: int = _setting(2000, "token budget of the trim strategy")
    summary_trigger_messages: int = _setting(12, "summarise when the thread holds more messages than this")
    summary_trigger_tokens: int = _setting(0, "summarise when the thread passes this many tokens (0: off)")
    summary_max_tokens: int = _setting(600, "the rolling summary is kept under this many tokens")
    summary_prompt: str | None = _setting(
        None,
        "instructions of the LLM summariser, in the language the summary should be written in "
        "(unset: remem's English ones); remem adds that the transcript is data",
    )
    token_counter: str = _setting("approximate", "how tokens are counted", choices=TOKEN_COUNTERS)
    turn_token_budget: int = _setting(
        0, "most tokens (input + output) one turn's model calls may use together (0: no limit)"
    )
    session_token_budget: int = _setting(
        0, "most tokens (input + output) a thread may spend in all (0: no limit)"
    )
    max_message_chars: int = _setting(100_000, "longest message accepted, in characters")
    thread_lease_timeout: float = _setting(
        30.0, "seconds a turn or append waits for another one on the same thread (then ThreadBusyError)"
    )
    embedder: str = _setting(
        "auto",
        "embedding model for semantic search: auto (a new store's first texts choose: e5 for Chinese, "
        "Japanese, Korean where remem[e5] is installed, else minilm; then recorded), minilm (English), "
        "e5 (multilingual, remem[e5]), fake (tests)",
        choices=EMBEDDERS,
    )
    embed_turns: str = _setting(
        "inline",
        "when a new turn is embedded and indexed for search: inline (in its write) or queue (by remem worker)",
        choices=EMBED_TURNS,
    )
    # Cost control (remem.usage): budgets in tokens (input + output) and in the prices' currency.
    call_token_budget: int = _setting(0, "most tokens one model call may use (0: no limit)")
    call_cost_budget: float = _setting(0.0, "most one model call may cost (0: no limit)")
    turn_cost_budget: float = _setting(0.0, "most one turn's model calls may cost (0: no limit)")
    session_cost_budget: float = _setting(0.0, "most a thread may cost in all (0: no limit)")
    user_day_token_budget: int = _setting(0, "most tokens one user may spend per UTC day (0: no limit)")
    user_day_cost_budget: float = _setting(0.0, "most one user may spend per UTC day (0: no limit)")
    approval_token_threshold: int = _setting(
        0, "ask for approval before a call above this many tokens (0: never)"
    )
    approval_cost_threshold: float = _setting(0.0, "ask for approval before a call costing more (0: never)")
    budget_action: str = _setting(
        "error",
        "what a call that would pass a budget does: error (BudgetExceededError), refuse (end the turn with "
        "a message), approve (ask, as above a threshold), compact (send the newest messages that fit)",
        choices=BUDGET_ACTIONS,
    )
    prices: tuple[tuple[str, float, float, float | None], ...] = _setting(
        (), "[remem.prices.MODEL] input, output, cached: price per million tokens (REMEM_PRICES: JSON)"
    )
    rate_limits: tuple[tuple[str, float | None, float | None], ...] = _setting(
        (),
        '[remem.rate_limits.MODEL] ("*": any model) requests_per_minute, tokens_per_minute, shared by '
        "the process (REMEM_RATE_LIMITS: JSON)",
    )
    rate_limit_max_wait: float = _setting(
        60.0, "longest a call waits for a rate limit or a provider's 429 before RateLimitError (seconds)"
    )

    def __post_init__(self) -> None:
        # Settings(...) built by hand is checked as load_settings checks its sources: a wrong type or choice
        # is a ConfigError naming the setting now, not a TypeError deep in a turn later.
        for f in fields(self):
            value = _convert(f.name, getattr(self, f.name), _kind_of(f), f.metadata["choices"])
            object.__setattr__(self, f.name, value)
        _check_whole(self)

    def _shown(self, f: dataclasses.Field[Any]) -> Any:
        """``f``'s value as it may be shown: a secret only says it is set; any text passes the one mask (a
        database URL or an endpoint may carry a password or a key)."""
        from remem._secrets import MASK, mask_secrets

        value = getattr(self, f.name)
        if f.metadata["secret"] and value:
            return MASK
        if isinstance(value, str):
            return mask_secrets(value, self.llm_api_key)
        return value

    def __repr__(self) -> str:
        # Every representation (repr, str, format, logging, rich's pretty printer, which falls back to a
        # custom __repr__) masks the secrets. The values themselves (attributes, dataclasses.asdict, pickle)
        # are the real ones: a model client needs the key.
        shown = ", ".join(f"{f.name}={self._shown(f)!r}" for f in fields(self))
        return f"Settings({shown})"

    def describe(self) -> list[tuple[str, str, str]]:
        """(setting, value, source-independent help) rows, secrets masked."""
        rows = []
        for f in fields(self):
            value = self._shown(f)
            if f.metadata["secret"] and value:
                value = "**** (set)"
            rows.append((f.name, "" if value is None else str(value), f.metadata["help"]))
        return rows

    def replace(self, **changes: Any) -> Settings:
        return load_settings(environ={}, config_file=None, **{**dataclasses.asdict(self), **changes})


def _env_name(name: str) -> str:
    return "REMEM_" + name.upper()


def _did_you_mean(name: str, known: list[str]) -> str:
    """``"; did you mean X?"`` for the known name closest to ``name``, else the list of known names."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f"; remem reads {', '.join(known)}"


def environment_warnings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``REMEM_*`` variable that remem does not read, naming the closest one it does.

    A typo such as ``REMEM_STRATEGIE`` would otherwise be ignored without a word.
    """
    env = os.environ if environ is None else environ
    known = [_env_name(f.name) for f in fields(Settings)] + list(_OTHER_ENV_NAMES)
    known += [_env_name(f.name) + "_FILE" for f in fields(Settings) if f.metadata["secret"]]
    warnings = []
    for name in sorted(env):
        if not name.startswith("REMEM_") or name in known or name.startswith(_OTHER_ENV_PREFIXES):
            continue
        warnings.append(f"{name} is not a remem setting and is ignored{_did_you_mean(name, known)}")
    return warnings


def _convert(name: str, raw: object, kind: Callable[[Any], Any], choices: tuple[str, ...]) -> Any:
    if raw is None:
        return None
    try:
        if kind is int and isinstance(raw, str):
            value: Any = int(raw.strip())
        elif kind is float and isinstance(raw, str):
            value = float(raw.strip())
        elif kind in (int, float) and isinstance(raw, bool):
            raise ValueError
        elif kind is int and isinstance(raw, float) and not raw.is_integer():
            raise ValueError  # 2.7 messages is a mistake, not 2
        else:
            value = kind(raw)
    except ConfigError:
        raise
    except (TypeError, ValueError):
        raise ConfigError(
            f"setting {name} ({_env_name(name)}) must be {kind.__name__}, got {raw!r}"
        ) from None
    if choices and value not in choices:
        raise ConfigError(
            f"setting {name} ({_env_name(name)}) must be one of {', '.join(choices)}; got {value!r}"
        )
    if kind in (int, float) and value < 0:
        raise ConfigError(f"setting {name} ({_env_name(name)}) must not be negative; got {value!r}")
    return value


def check_summary_sizes(keep_messages: int, trigger_messages: int) -> None:
    """The summary strategy keeps ``keep_messages`` and runs past ``trigger_messages``: keep must be below."""
    if trigger_messages and keep_messages >= trigger_messages:
        raise ConfigError(
            f"keep_messages ({keep_messages}, REMEM_KEEP_MESSAGES) must be below summary_trigger_messages "
            f"({trigger_messages}, REMEM_SUMMARY_TRIGGER_MESSAGES), or the summary would never remove "
            f"anything: lower the first or raise the second (e.g. REMEM_SUMMARY_TRIGGER_MESSAGES="
            f"{keep_messages * 2})"
        )


def _check_whole(settings: Settings) -> None:
    """What no single value shows: settings that each look right but cannot work together or at all."""
    from remem._secrets import mask_secrets
    from remem._url import parse_database_url

    try:
        parse_database_url(settings.database_url)
    except ConfigError as exc:
        raise ConfigError(f"setting database_url (REMEM_DATABASE_URL): {exc}") from None
    base = settings.llm_base_url
    if base is not None and not base.strip().lower().startswith(("http://", "https://")):
        raise ConfigError(
            f"setting llm_base_url (REMEM_LLM_BASE_URL) must start with http:// or https://, got "
            f"{mask_secrets(base)!r}; write it whole, e.g. http://localhost:11434/v1"
        )


def _read_toml(path: Path, *, named_by_env: bool, table: tuple[str, ...] = ()) -> dict[str, Any]:
    """The settings of ``path``: its ``[remem]`` table (or the whole file), or the table at ``table``
    (``("tool", "remem")`` in pyproject.toml: none when the file has no such table)."""
    fix = "fix the file or unset REMEM_CONFIG" if named_by_env else "fix the file"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid UTF-8 TOML: {exc}; {fix}") from None
    except OSError as exc:
        where = "fix its permissions or unset REMEM_CONFIG" if named_by_env else "fix its permissions"
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc}); {where}") from None
    found: Any = data.get("remem", data)
    if table:
        found = data
        for key in table:
            if not isinstance(found, dict) or key not in found:
                return {}
            found = found[key]
    if not isinstance(found, dict):
        raise ConfigError(f"{path}: [{'.'.join(table or ('remem',))}] must be a table of settings; {fix}")
    return found


def _config_source(
    env: Mapping[str, str], config_file: str | Path | None
) -> tuple[Path, dict[str, Any]] | None:
    """The file the settings come from and its settings (see the module docstring), or None."""
    explicit = env.get("REMEM_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"REMEM_CONFIG names {explicit}, which does not exist; fix or unset it")
        return path, _read_toml(path, named_by_env=True)
    if config_file is None:
        return None
    path = Path(config_file)
    if path.is_file():
        return path, _read_toml(path, named_by_env=False)
    pyproject = path.with_name(PYPROJECT_FILE)
    if path.name == DEFAULT_CONFIG_FILE and pyproject.is_file():
        return pyproject, _read_toml(pyproject, named_by_env=False, table=("tool", "remem"))
    return None


def _secret_file(variable: str, path: str) -> str:
    """The secret held by the file ``variable`` names (a mounted secret: read again by every
    ``load_settings``, so a long-running ``remem worker`` picks a rotated key up on SIGHUP)."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ConfigError(
            f"{variable} names {path}, which cannot be read ({why}); fix the file or unset it"
        ) from None


def load_settings(
    *,
    environ: Mapping[str, str] | None = None,
    config_file: str | Path | None = DEFAULT_CONFIG_FILE,
    **overrides: Any,
) -> Settings:
    """Read the effective settings.

    ``config_file`` is read when it exists (``REMEM_CONFIG`` names another file, which must exist); without
    it, the ``[tool.remem]`` table of the ``pyproject.toml`` next to it.
    Unknown keys, wrong types and values outside the accepted choices raise :class:`ConfigError`
    naming the setting and what it accepts.
    """
    env = os.environ if environ is None else environ
    known = {f.name: f for f in fields(Settings)}

    file_values: dict[str, Any] = {}
    source = _config_source(env, config_file)
    if source is not None:
        path, file_values = source
        for key in file_values:
            if key not in known:
                raise ConfigError(f"{path}: unknown setting {key!r}{_did_you_mean(key, list(known))}")
            if known[key].metadata["secret"]:
                raise ConfigError(
                    f"{path}: {key} must not be written in a file; set {_env_name(key)} in the environment, "
                    f"or {_env_name(key)}_FILE to a file that holds only the secret"
                )

    for key in overrides:
        if key not in known:
            raise ConfigError(f"unknown setting {key!r}{_did_you_mean(key, list(known))}")

    values: dict[str, Any] = {}
    for name, f in known.items():
        kind = _kind_of(f)
        if name in overrides:
            raw = overrides[name]
        elif _env_name(name) in env and env[_env_name(name)] != "":
            raw = env[_env_name(name)]
        elif name in file_values:
            raw = file_values[name]
        elif f.metadata["secret"] and env.get(_env_name(name) + "_FILE"):
            raw = _secret_file(_env_name(name) + "_FILE", env[_env_name(name) + "_FILE"])
        else:
            continue
        values[name] = _convert(name, raw, kind, f.metadata["choices"])
    if values.get("llm_api_key") is None and "llm_api_key" not in overrides and env.get("OPENAI_API_KEY"):
        values["llm_api_key"] = env["OPENAI_API_KEY"]
    settings = Settings(**values)
    # Sizes are checked against the strategy the configuration names. Settings given in code only (keyword
    # arguments, Settings.replace) may be meant for another strategy (build_agent(strategy="filter",
    # settings=...)): the summary strategy checks them when it is built.
    configured = {"strategy", "keep_messages", "summary_trigger_messages"} - set(overrides)
    if settings.strategy == "summary" and any(
        name in file_values or _env_name(name) in env for name in configured
    ):
        check_summary_sizes(settings.keep_messages, settings.summary_trigger_messages)
    return settings


def _price_rows(raw: object) -> tuple[tuple[str, float, float, float | None], ...]:
    """``prices`` from a TOML table, a JSON object (REMEM_PRICES) or rows: model -> input/output/cached."""
    import json

    hint = 'write it as [remem.prices."MODEL"] with input = ..., output = ... (and cached = ...)'
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            raise ConfigError(f"REMEM_PRICES must be a JSON object of model -> prices; {hint}") from None
    if isinstance(raw, (tuple, list)):
        raw = {row[0]: dict(zip(("input", "output", "cached"), row[1:], strict=False)) for row in raw}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"setting prices must be a table of models; {hint}")
    rows = []
    for model, price in sorted(raw.items()):
        if not isinstance(price, Mapping) or set(price) - {"input", "output", "cached"}:
            raise ConfigError(f"prices for {model!r} must hold only input, output and cached; {hint}")
        values: list[float | None] = []
        for key in ("input", "output", "cached"):
            value = price.get(key)
            if value is None and key != "cached":
                raise ConfigError(f"prices for {model!r} need {key}; {hint}")
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
            ):
                raise ConfigError(f"prices for {model!r}: {key} must be a number >= 0, got {value!r}")
            values.append(None if value is None else float(value))
        rows.append((str(model), float(values[0] or 0), float(values[1] or 0), values[2]))
    return tuple(rows)


def _rate_limit_rows(raw: object) -> tuple[tuple[str, float | None, float | None], ...]:
    """``rate_limits`` from a TOML table, a JSON object (REMEM_RATE_LIMITS) or rows: model -> per minute."""
    import json

    keys = ("requests_per_minute", "tokens_per_minute")
    hint = 'write it as [remem.rate_limits."MODEL"] with requests_per_minute = ... and/or tokens_per_minute = ...'
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            raise ConfigError(f"REMEM_RATE_LIMITS must be a JSON object of model -> limits; {hint}") from None
    if isinstance(raw, (tuple, list)):
        raw = {row[0]: dict(zip(keys, row[1:], strict=False)) for row in raw}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"setting rate_limits must be a table of models; {hint}")
    rows = []
    for model, limit in sorted(raw.items()):
        if not isinstance(limit, Mapping) or not limit or set(limit) - set(keys):
            raise ConfigError(f"rate limits for {model!r} must hold {' and/or '.join(keys)}; {hint}")
        values: list[float | None] = []
        for key in keys:
            value = limit.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
            ):
                raise ConfigError(f"rate limits for {model!r}: {key} must be a number > 0, got {value!r}")
            values.append(None if value is None else float(value))
        rows.append((str(model), values[0], values[1]))
    return tuple(rows)


def _kind_of(f: dataclasses.Field[Any]) -> Callable[[Any], Any]:
    text = str(f.type)
    if f.name == "prices":
        return _price_rows
    if f.name == "rate_limits":
        return _rate_limit_rows
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    return str
