"""Settings from the environment and remem.toml, with clear errors and masked secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from remem.config import Settings, load_settings
from remem.errors import ConfigError


def test_defaults_need_nothing(tmp_path: Path) -> None:
    settings = load_settings(environ={}, config_file=tmp_path / "absent.toml")
    assert settings == Settings()
    assert settings.database_url.startswith("sqlite:///")


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "remem.toml"
    config.write_text('[remem]\nstrategy = "trim"\nmax_tokens = 500\nkeep_messages = 4\n')
    settings = load_settings(environ={"REMEM_MAX_TOKENS": "800"}, config_file=config)
    assert (settings.strategy, settings.max_tokens, settings.keep_messages) == ("trim", 800, 4)


def test_remem_config_names_another_file(tmp_path: Path) -> None:
    config = tmp_path / "other.toml"
    config.write_text('strategy = "delete"\n')
    assert load_settings(environ={"REMEM_CONFIG": str(config)}).strategy == "delete"
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(environ={"REMEM_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"REMEM_STRATEGY": "forget-everything"}, "strategy .*must be one of filter, delete, trim, summary"),
        ({"REMEM_MAX_TOKENS": "lots"}, "max_tokens .*REMEM_MAX_TOKENS.* must be int"),
        ({"REMEM_KEEP_MESSAGES": "-3"}, "must not be negative"),
        ({"REMEM_TOKEN_COUNTER": "words"}, "approximate, o200k, cl100k"),
    ],
)
def test_bad_values_name_the_setting_and_what_it_accepts(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(environ=environ, config_file=None)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"keep_messages": "lots"}, "keep_messages .*must be int"),
        ({"strategy": "forget-everything"}, "must be one of filter, delete, trim, summary"),
        ({"max_tokens": -1}, "must not be negative"),
        ({"llm_timeout": True}, "llm_timeout .*must be float"),
        ({"prices": {"m": {"input": "free"}}}, "prices for 'm'"),
    ],
)
def test_settings_built_by_hand_are_checked_as_loaded_ones_are(
    given: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings(**given)  # type: ignore[arg-type]


def test_settings_built_by_hand_take_what_the_loader_takes() -> None:
    assert Settings(keep_messages="4", llm_timeout=5) == load_settings(  # type: ignore[arg-type]
        environ={}, config_file=None, keep_messages=4, llm_timeout=5.0
    )
    assert Settings(prices=(("m", 1, 2, None),)).prices == (("m", 1.0, 2.0, None),)


def test_keys_are_refused_in_the_file(tmp_path: Path) -> None:
    config = tmp_path / "remem.toml"
    config.write_text('llm_api_key = "sk-123456789"\n')
    with pytest.raises(ConfigError, match="set REMEM_LLM_API_KEY in the environment"):
        load_settings(environ={}, config_file=config)


def test_unknown_keys_and_broken_toml_are_errors(tmp_path: Path) -> None:
    config = tmp_path / "remem.toml"
    config.write_text("stratgey = 'trim'\n")
    with pytest.raises(ConfigError, match="unknown setting 'stratgey'"):
        load_settings(environ={}, config_file=config)
    config.write_text("strategy = \n")
    with pytest.raises(ConfigError, match="not valid UTF-8 TOML"):
        load_settings(environ={}, config_file=config)
    config.write_bytes(b'strategy = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="not valid UTF-8 TOML"):
        load_settings(environ={}, config_file=config)
    config.write_text("keep_messages = 2.7\n")
    with pytest.raises(ConfigError, match=r"keep_messages .* must be int"):
        load_settings(environ={}, config_file=config)


def test_secrets_are_masked_when_described() -> None:
    settings = load_settings(environ={"REMEM_LLM_API_KEY": "sk-verysecretvalue"}, config_file=None)
    shown = dict((name, value) for name, value, _ in settings.describe())
    assert "verysecret" not in shown["llm_api_key"]
    assert shown["llm_api_key"] == "**** (set)"


def test_openai_api_key_is_a_fallback() -> None:
    assert load_settings(environ={"OPENAI_API_KEY": "k"}, config_file=None).llm_api_key == "k"


def test_unknown_environment_names_get_the_closest_known_one() -> None:
    from remem.config import environment_warnings

    warnings = environment_warnings(
        {"REMEM_STRATEGIE": "trim", "REMEM_STRATEGY": "trim", "REMEM_TEST_POSTGRES_URL": "x", "HOME": "/"}
    )
    assert warnings == ["REMEM_STRATEGIE is not a remem setting and is ignored; did you mean REMEM_STRATEGY?"]
    (far,) = environment_warnings({"REMEM_ZZZ": "1"})
    assert "REMEM_ZZZ is not a remem setting" in far and "REMEM_DATABASE_URL" in far


def test_describe_masks_a_password_in_the_database_url() -> None:
    for url in [
        "postgresql://u:hunter2@h/db",
        "postgresql://u@h/db?password=hunter2",
        "host=h dbname=db password=hunter2",
    ]:
        shown = dict(
            (name, value)
            for name, value, _ in load_settings(environ={}, config_file=None, database_url=url).describe()
        )
        assert "hunter2" not in shown["database_url"] and "***" in shown["database_url"]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"REMEM_KEEP_MESSAGES": "20"},
            r"keep_messages \(20, REMEM_KEEP_MESSAGES\) must be below .*REMEM_SUMMARY",
        ),
        (
            {"REMEM_DATABASE_URL": "mysql://x"},
            r"database_url \(REMEM_DATABASE_URL\): unsupported .*postgresql://",
        ),
        (
            {"REMEM_LLM_BASE_URL": "localhost:11434/v1"},
            r"REMEM_LLM_BASE_URL\) must start with http:// or https://",
        ),
    ],
)
def test_settings_that_would_fail_at_first_use_fail_at_load(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(environ=environ, config_file=None)


def test_sizes_are_checked_only_for_the_strategy_that_uses_them() -> None:
    assert load_settings(environ={"REMEM_KEEP_MESSAGES": "20", "REMEM_STRATEGY": "filter"}, config_file=None)
    raised = load_settings(
        environ={"REMEM_KEEP_MESSAGES": "20", "REMEM_SUMMARY_TRIGGER_MESSAGES": "40"}, config_file=None
    )
    assert raised.keep_messages == 20
    assert load_settings(environ={"REMEM_LLM_BASE_URL": "https://api.example/v1"}, config_file=None)


def test_file_errors_mention_remem_config_only_when_it_is_set(tmp_path: Path) -> None:
    config = tmp_path / "remem.toml"
    config.write_text("strategy = \n")
    with pytest.raises(ConfigError) as unset:
        load_settings(environ={}, config_file=config)
    assert "REMEM_CONFIG" not in str(unset.value) and "fix the file" in str(unset.value)
    with pytest.raises(ConfigError) as named:
        load_settings(environ={"REMEM_CONFIG": str(config)})
    assert "unset REMEM_CONFIG" in str(named.value)


def test_a_typo_in_the_file_gets_the_closest_setting(tmp_path: Path) -> None:
    config = tmp_path / "remem.toml"
    config.write_text("[remem]\nstratgey = 'trim'\n")
    with pytest.raises(ConfigError, match="unknown setting 'stratgey'; did you mean strategy"):
        load_settings(environ={}, config_file=config)
    with pytest.raises(ConfigError, match="did you mean keep_messages"):
        load_settings(environ={}, config_file=None, keep_mesages=3)


def test_pyproject_tool_remem_is_read_when_there_is_no_remem_toml(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "app"\n\n[tool.remem]\nstrategy = "trim"\n\n'
        '[tool.remem.prices."m"]\ninput = 1.0\noutput = 2.0\n'
    )
    settings = load_settings(environ={}, config_file=tmp_path / "remem.toml")
    assert settings.strategy == "trim" and settings.prices == (("m", 1.0, 2.0, None),)
    # remem.toml, when there is one, is read instead (whole: nothing of pyproject's table is merged in).
    (tmp_path / "remem.toml").write_text("keep_messages = 4\n")
    settings = load_settings(environ={}, config_file=tmp_path / "remem.toml")
    assert (settings.strategy, settings.keep_messages, settings.prices) == ("summary", 4, ())
    # A pyproject.toml without the table sets nothing; a typo in the table is named with the file.
    (tmp_path / "remem.toml").unlink()
    pyproject.write_text('[project]\nname = "app"\n')
    assert load_settings(environ={}, config_file=tmp_path / "remem.toml") == Settings()
    pyproject.write_text("[tool.remem]\nembeder = 'e5'\n")
    with pytest.raises(
        ConfigError, match=r"pyproject.toml: unknown setting 'embeder'; did you mean embedder"
    ):
        load_settings(environ={}, config_file=tmp_path / "remem.toml")


def test_e5_is_an_embedder_setting() -> None:
    assert load_settings(environ={"REMEM_EMBEDDER": "e5"}, config_file=None).embedder == "e5"


def _readme_settings() -> dict[str, str]:
    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Configuration\n") : text.index("### Command line\n")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            name = cells[0].strip("`")
            assert name not in rows, f"{name} has two rows"
            rows[name] = cells[1]
    return rows


def _shown_default(value: object) -> str:
    if value is None:
        return "unset"
    if value == ():
        return "none"
    return f"`{value}`" if isinstance(value, str) else str(value)


def test_the_readme_lists_every_setting_with_its_variable_and_default() -> None:
    from dataclasses import fields

    rows = _readme_settings()
    expected = {f"REMEM_{f.name.upper()}": _shown_default(f.default) for f in fields(Settings)}
    assert {name: rows.get(name) for name in expected} == expected
    assert set(rows) - set(expected) == {"REMEM_CONFIG", "OPENAI_API_KEY"}  # read, but not settings


def test_sizes_given_in_code_are_left_to_the_strategy_they_are_meant_for() -> None:
    from remem.strategies import strategy_from_name

    wide = Settings(keep_messages=100)  # for build_agent(strategy="filter", settings=wide), say
    assert strategy_from_name("filter", wide)
    with pytest.raises(ConfigError, match="REMEM_SUMMARY_TRIGGER_MESSAGES"):
        strategy_from_name("summary", wide)
