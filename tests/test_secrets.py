"""The one secrets mask: whatever characters a password or key holds, no part of it is left in view."""

from __future__ import annotations

import io
import logging
import pickle
import string

from hypothesis import example, given
from hypothesis import strategies as st
from rich.console import Console
from rich.pretty import pprint

from remem._secrets import mask_secrets
from remem._url import display_url, parse_database_url
from remem.config import Settings

# A password may hold any printable character but white space (a raw space ends a URL in any text).
_PASSWORD = st.text(
    alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=6, max_size=24
)
_HOST = st.sampled_from(["127.0.0.1:5432", "db.example", "[::1]:6543", "h"])


def _fragments(password: str) -> list[str]:
    # Any 4-character piece of the password counts as shown ("p@ss@word" showing "word" is a leak).
    return [password[i : i + 4] for i in range(len(password) - 3)]


def _assert_hidden(password: str, masked: str, around: str) -> None:
    for piece in _fragments(password):
        if piece not in around:  # a piece that is also the user, host or database name tells nothing
            assert piece not in masked, (password, masked)


@given(password=_PASSWORD, host=_HOST, user=st.sampled_from(["me", "admin@server", "u-1"]))
def test_no_piece_of_a_url_password_is_shown(password: str, host: str, user: str) -> None:
    for scheme in ("postgresql", "postgres", "postgresql+psycopg", "http", "https"):
        url = f"{scheme}://{user}:{password}@{host}/app?sslmode=require"
        around = f"{scheme}://{user}:@{host}/app?sslmode=require"
        _assert_hidden(password, mask_secrets(url), around)
        _assert_hidden(password, mask_secrets(f"cannot connect to {url!r}: refused"), around)


_PLAIN = st.text(
    alphabet=string.ascii_letters + string.digits + "@:!?#$&*()[]{}=+'\";,.<>~", min_size=2, max_size=12
)


@given(left=_PLAIN, right=_PLAIN, host=_HOST)
def test_a_raw_at_in_the_password_connects_as_meant_and_is_never_shown(
    left: str, right: str, host: str
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    password = f"{left}@{right}"
    url = f"postgresql://me:{password}@{host}/app"
    parsed = parse_database_url(url)
    info = conninfo_to_dict(parsed.target)  # libpq reads what the user meant: the last "@" ends the userinfo
    assert (info["user"], info["password"], info["dbname"]) == ("me", password, "app")
    assert host.startswith(info["host"]) or info["host"] in host
    around = f"postgresql://me:@{host}:5432/app"
    _assert_hidden(password, repr(parsed), around + _repr_frame(host))
    _assert_hidden(password, display_url(url), around)


@given(password=_PASSWORD, host=_HOST)
@example(password="00base", host="127.0.0.1:5432")  # "base" is in the repr's own "DatabaseURL"
def test_no_piece_of_any_password_is_shown_by_a_parsed_url(password: str, host: str) -> None:
    url = f"postgresql://me:{password}@{host}/app"
    _assert_hidden(password, repr(parse_database_url(url)), _repr_frame(host))


def _repr_frame(host: str) -> str:
    # What the repr shows around any password ("DatabaseURL(kind=..., target=..."): a piece of the password
    # that is also a piece of this frame ("base" of "00base" in "DatabaseURL") tells nothing.
    return repr(parse_database_url(f"postgresql://me:x@{host}/app"))


@given(key=st.text(alphabet=string.ascii_letters + string.digits + "-_.~", min_size=8, max_size=40))
def test_a_key_in_a_query_parameter_is_masked(key: str) -> None:
    for name in ("key", "api_key", "apikey", "api-key", "password", "token", "access_token", "secret"):
        url = f"https://llm.example/v1?x=1&{name}={key}&y=2"
        masked = mask_secrets(url)
        assert key not in masked, masked
        assert masked.endswith("&y=2") and "x=1" in masked


def test_a_quoted_dsn_password_with_an_escaped_quote_is_masked_whole() -> None:
    masked = mask_secrets(r"host=h password='se\'cr et!' dbname=app")
    assert "cr" not in masked and "et!" not in masked and "dbname=app" in masked


SECRET_KEY = "sk-live-kK9mZ2qX7vB4nR8tY1wE"
DB_PASSWORD = "db@pa:ss/w0rd@x"


def _settings() -> Settings:
    return Settings(
        llm_api_key=SECRET_KEY,
        database_url=f"postgresql://me:{DB_PASSWORD}@db.example/app",
        llm_base_url="https://llm.example/v1?key=QueryKey123456",
    )


def test_settings_show_no_secret_in_any_representation() -> None:
    settings = _settings()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    log = logging.getLogger("remem.test.secrets")
    log.addHandler(handler)
    try:
        log.warning("settings %s %r", settings, settings)
        log.warning(settings)
    finally:
        log.removeHandler(handler)
    pretty = io.StringIO()
    pprint(settings, console=Console(file=pretty, width=200))
    shown = {
        "repr": repr(settings),
        "str": str(settings),
        "format": f"{settings}",
        "logging": stream.getvalue(),
        "rich": pretty.getvalue(),
        "describe": str(settings.describe()),
    }
    for how, text in shown.items():
        for secret in (SECRET_KEY, "kK9mZ2qX", "pa:ss", "w0rd", "QueryKey123456"):
            assert secret not in text, (how, text)
        assert "db.example" in text, (how, text)  # masked, not blanked
    # The values themselves stay whole: the model client needs the key, a pickled copy is the same settings.
    assert settings.llm_api_key == SECRET_KEY
    assert pickle.loads(pickle.dumps(settings)) == settings
