"""The one masking function for secrets: every output path (CLI, errors, logs, reprs, prompts) uses it.

It hides passwords in database URLs (``scheme://user:PASSWORD@host``) and libpq DSNs
(``password=PASSWORD``), ``?password=`` query parameters, and API-key-like tokens (``sk-...``).
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask_secrets"]

MASK = "***"

_PATTERNS = (
    # scheme://user:password@host  ->  scheme://user:***@host
    (re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]*(?=@)"), r"\g<head>" + MASK),
    # password=... in a libpq DSN or a query string (quoted or not)
    (
        re.compile(
            r"(?P<head>\b(?:password|passwd|pwd|api_key|apikey|token)\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s&;]+)",
            re.I,
        ),
        r"\g<head>" + MASK,
    ),
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
