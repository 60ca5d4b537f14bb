"""Text from memory as data inside XML-like prompt sections: escaped so it cannot open or close a tag."""

from __future__ import annotations

import html
import re

__all__ = ["escape_attribute", "escape_text"]

# Control characters (but tab, newline, carriage return) have no place in a prompt and can confuse parsers.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def escape_text(text: str) -> str:
    """Text as XML character data: ``&``, ``<`` and ``>`` escaped, control characters dropped."""
    return html.escape(_CONTROL.sub("", text), quote=False)


def escape_attribute(text: str) -> str:
    """Text as a double-quoted XML attribute value."""
    return escape_text(text).replace('"', "&quot;")
