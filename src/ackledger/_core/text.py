"""Text that is printed back to people: what may not be in it."""

from __future__ import annotations

import unicodedata


def breaks_line(ch: str) -> bool:
    """A control character (newline, tab, escape, NUL...), a line or paragraph separator, or
    half of a surrogate pair. Every other character is text, the full-width space included
    (str.isprintable would refuse it, and Japanese text is written with it)."""
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character that ``breaks_line``: printed, it would forge lines
    or drive a terminal."""
    return any(breaks_line(ch) for ch in text)
