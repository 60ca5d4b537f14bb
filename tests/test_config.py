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
