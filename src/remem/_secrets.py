"""The one masking function for secrets: every output path (CLI, errors, logs, reprs, prompts) uses it.

It hides passwords in URLs (``scheme://user:PASSWORD@host``), libpq DSNs (``password=PASSWORD``),
``?password=`` / ``?key=`` / ``?api_key=``-style query parameters, and API-key-like tokens (``sk-...``).

A password may hold any character but white space, a raw ``@`` or ``:`` included: the userinfo runs from
the first ``:`` after the user to the LAST ``@`` of the URL (as :func:`remem._url.parse_database_url` reads
it), so no part of the password is left in view. The cost is that an ``@`` later in the URL (a query value
``?user=me@corp``) masks a little more than the password; never less.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask_secrets"]

MASK = "***"

_PATTERNS = (
    # scheme://user:password@host  ->  scheme://user:***@host. The user holds no ":" or "/" (an "@" it may:
    # Azure's user@server); the password runs to the last "@" before white space, whatever it holds.
    (re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/\s]*:)\S*(?=@)"), r"\g<head>" + MASK),
    # password=... in a libpq DSN (quoted, with backslash escapes, or not) or anywhere in a query string
    (
        re.compile(
            r"(?P<head>\b(?:password|passwd|pwd|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token"
            r"|client_secret)\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s&;#]+)",
            re.I,
        ),
        r"\g<head>" + MASK,
    ),
    # shorter names that are secrets only as a URL's query parameter (?key=..., &secret=..., &sig=...)
    (re.compile(r"(?P<head>[?&](?:key|secret|sig|signature|auth|pass)=)[^\s&#]+", re.I), r"\g<head>" + MASK),
    # OpenAI-style keys and bearer tokens
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), "sk-" + MASK),
    (re.compile(r"(?P<head>\bBearer\s+)[A-Za-z0-9._~+/-]{8,}=*", re.I), r"\g<head>" + MASK),
)


def mask_secrets(text: str, *secrets: str | None) -> str:
    """``text`` with every password, key or token replaced by ``***``.

    ``secrets`` are literal values (a configured API key, say) masked wherever they appear, whatever
    their shape.
    """
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
