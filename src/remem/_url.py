"""Database URLs, parsed in one place, and shown in one way.

    memory://                      in this process only
    sqlite:///relative/path.db     a SQLite file (sqlite:////absolute/path.db)
    postgresql://user@host/db      PostgreSQL (postgres:// too)

Every part of remem that takes a database URL calls :func:`parse_database_url`; every message or
output that names a database calls :func:`display_url`, which never shows a user or a password.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from remem._secrets import mask_secrets
from remem.errors import ArgumentTypeError, ConfigError, MissingDependencyError

__all__ = ["ACCEPTED_URLS", "DatabaseURL", "describe_postgres", "display_url", "parse_database_url"]

ACCEPTED_URLS = "memory://, sqlite:///PATH (sqlite:////ABSOLUTE/PATH) or postgresql://USER@HOST:PORT/DB"


_LIBPQ_KEYS = (
    "host|hostaddr|port|dbname|user|password|passfile|service|connect_timeout|sslmode|options"
    "|application_name|target_session_attrs|sslrootcert|sslcert|sslkey|krbsrvname|gssencmode"
)
_LIBPQ_DSN = re.compile(rf"(?:\s*(?:{_LIBPQ_KEYS})\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+")


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed database URL: ``kind`` is memory, sqlite or postgres; ``target`` a path or a DSN."""

    kind: str
    target: str

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file. Hand this on, never ``target``: a parser that sees the text again would read a
        file named ``memory`` or ``host=x.db`` as another kind of URL, while a Path is always a file."""
        return Path(self.target)

    def __repr__(self) -> str:  # a DSN may hold a password
        return f"DatabaseURL(kind={self.kind!r}, target={mask_secrets(self.target)!r})"


def parse_database_url(url: str | Path) -> DatabaseURL:
    """Check a database URL and say what it names; :class:`ConfigError` listing the forms otherwise.

    A plain path (``str`` or :class:`~pathlib.Path`) and ``:memory:`` name SQLite, as the stock
    savers' ``from_conn_string`` accept them.
    """
    if isinstance(url, Path):
        return DatabaseURL("sqlite", str(url))
    if url is not None and not isinstance(url, str):
        raise ArgumentTypeError(
            f"a database URL is a str or a Path, got {type(url).__name__}; use {ACCEPTED_URLS}"
        )
    text = (url or "").strip()
    if text in ("memory://", "memory:", "memory"):
        return DatabaseURL("memory", "")
    if text.startswith("sqlite:///"):
        path = text[len("sqlite:///") :]
        if not path or path.endswith("/"):
            raise ConfigError(f"{mask_secrets(text)!r} names no file; use {ACCEPTED_URLS}")
        return DatabaseURL("sqlite", path)
    if text.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        return DatabaseURL(
            "postgres", _quote_userinfo(text.replace("postgresql+psycopg://", "postgresql://", 1))
        )
    # A libpq key=value DSN ("dbname=app user=me", "service=prod"); a malformed one naming a host, a
    # database or a password is PostgreSQL too (refused later, without echoing it), never a file name.
    if _LIBPQ_DSN.fullmatch(text) or any(k in text for k in ("host=", "dbname=", "password=")):
        return DatabaseURL("postgres", text)
    if text == ":memory:" or (text and "://" not in text):
        return DatabaseURL("sqlite", text)
    if text.startswith(("http://", "https://")):
        raise ConfigError(
            f"{mask_secrets(text)!r} is a remem serve URL, which this reads only through Memory.from_url and the "
            "CLI's card, summary and search (REMEM_API_KEY holding the key); here give the database's own "
            f"URL: {ACCEPTED_URLS}"
        )
    raise ConfigError(f"unsupported database URL {mask_secrets(text)!r}; use {ACCEPTED_URLS}")


def _quote_userinfo(url: str) -> str:
    """``url`` with a raw ``@`` (or ``:``) of its password percent-encoded, as the user meant it.

    libpq ends the userinfo at the first ``@``: ``postgresql://me:p@ss@db.example/app`` would connect to a
    host named ``ss@db.example`` as password ``p`` (and show the rest of the password in its error). Here the
    userinfo ends at the last ``@`` before the path, as :func:`remem._secrets.mask_secrets` reads it, and the
    user ends at its first ``:``. A URL with one ``@`` or none is returned unchanged.
    """
    from urllib.parse import quote, unquote

    scheme, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if authority.count("@") < 2:
        return url
    userinfo, _, host = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    encoded = quote(unquote(user), safe="") + colon + quote(unquote(password), safe="")
    return f"{scheme}://{encoded}@{host}{slash}{path}"


def describe_postgres(dsn: str) -> str:
    """``host:port/dbname`` of a PostgreSQL URL: what a message may show (never a user or password)."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise MissingDependencyError.for_extra("psycopg", "postgres") from None
    try:
        info = conninfo_to_dict(dsn)
    except Exception:
        raise ConfigError(f"not a valid PostgreSQL URL; use {ACCEPTED_URLS}") from None
    return f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def display_url(url: str | Path) -> str:
    """The URL as it may be shown to people: a PostgreSQL URL loses its user and password."""
    parsed = parse_database_url(url)
    if parsed.kind == "postgres":
        return f"postgresql://{describe_postgres(parsed.target)}"
    if parsed.kind == "sqlite":
        return f"sqlite:///{parsed.target}"
    return "memory://"
