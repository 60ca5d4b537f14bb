"""No command shows a database password: not in its output, its prompts or its errors.

The machine's PostgreSQL trusts local connections, so it accepts any password: the URLs below carry one in
each form libpq takes (``user:password@``, ``?password=``, a key=value DSN), and every command (found from
the click group) runs against them, reading real data, and against a server that is not there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from remem.testing import offline_settings
from tests.cli_commands import all_commands, run, seed

PASSWORD = "Pw-h0ney-badger-77"
# A password holding a raw "@" and ":" (libpq alone would read "Pw" as the password and "h0ney:b" as the host).
RAW_PASSWORD = "Pw@h0ney:b@dger-77"
pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("REMEM_") or name == "OPENAI_API_KEY":
            monkeypatch.delenv(name)


def _forms(url: str) -> dict[str, str]:
    info = conninfo_to_dict(url)
    user = info.get("user", "postgres")
    rest = f"{info['host']}:{info.get('port', 5432)}/{info['dbname']}"
    return {
        "userinfo": f"postgresql://{user}:{PASSWORD}@{rest}",
        "raw_at": f"postgresql://{user}:{RAW_PASSWORD}@{rest}",
        "query": f"postgresql://{user}@{rest}?password={PASSWORD}",
        "dsn": (
            f"host={info['host']} port={info.get('port', 5432)} dbname={info['dbname']} "
            f"user={user} password={PASSWORD}"
        ),
    }


def _assert_hidden(path: tuple[str, ...], output: str) -> None:
    for secret in (PASSWORD, "h0ney", "dger-77"):
        assert secret not in output, (path, output)
        assert secret not in output.replace("\n", ""), (path, output)  # not even across a wrapped line
    assert "Traceback" not in output, (path, output)


@pytest.mark.parametrize("form", ["userinfo", "raw_at", "query", "dsn"])
def test_no_command_shows_the_password(pg_url: str, form: str, tmp_path: Path) -> None:
    url = _forms(pg_url)[form]
    seed(pg_url)
    codes = {}
    for path in all_commands():
        result = run(path, url)
        _assert_hidden(path, result.output)
        codes[path] = result.exit_code
    if form != "dsn":  # a DSN is refused by the memory store's commands (clearly, and masked)
        assert all(code == 0 for code in codes.values()), codes
    assert list(tmp_path.iterdir()) == []  # no file named after the DSN, no stray SQLite file
    # The configured URL (REMEM_DATABASE_URL) instead of --db: `remem config` shows it, masked.
    shown = run(("config",), None, env={"REMEM_DATABASE_URL": url})
    _assert_hidden(("config",), shown.output)
    assert shown.exit_code == 0 and "***" in shown.output


def test_no_error_shows_the_password(tmp_path: Path) -> None:
    for url in [
        f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/nowhere",  # no server there
        f"postgresql://postgres:{RAW_PASSWORD}@127.0.0.1:1/nowhere",
        f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/no_such_database_here",
        f"host=127.0.0.1 port=1 dbname=x user=postgres password={PASSWORD}",
    ]:
        for path in all_commands():
            result = run(path, url)
            _assert_hidden(path, result.output)
            if path != ("config",):
                assert result.exit_code == 1 and result.stderr.startswith("Error: "), (path, result.output)


def test_config_masks_a_key_in_the_endpoint_query() -> None:
    shown = run(("config",), None, env={"REMEM_LLM_BASE_URL": "https://llm.example/v1?key=Qk-77-secret-99"})
    assert shown.exit_code == 0, shown.output
    assert "Qk-77" not in shown.output and "llm.example" in shown.output


def _open_each(url: str) -> list[str]:
    from remem import Memory, checkpointer_from_url
    from remem.checkpoint.postgres import PostgresSaver
    from remem.errors import RememError
    from remem.store.postgres import PostgresStore

    settings = offline_settings()
    openers = [
        lambda: checkpointer_from_url(url),
        lambda: Memory.from_url(url, settings=settings),
        lambda: PostgresSaver.from_conn_string(url),
        lambda: PostgresStore.from_conn_string(url),
    ]
    messages = []
    for opener in openers:
        with pytest.raises(RememError) as caught, opener() as opened:
            if hasattr(opened, "setup"):
                opened.setup()
        messages.append(str(caught.value))
    return messages


def test_the_library_openers_show_no_piece_of_a_raw_at_password() -> None:
    for message in _open_each(f"postgresql://postgres:{RAW_PASSWORD}@127.0.0.1:1/nowhere"):
        _assert_hidden(("library",), message)
        assert "127.0.0.1" in message, message  # the host it tried, so the user can check it
