"""Printable text: what an event's id, type and subject may hold, an extension's string, and
the text ackledger prints back to people (a quarantine's reason, an inbox's name).

"Printable" is a fixed list, not str.isprintable: that one refuses characters its Python's
Unicode tables do not know yet, so a newer source could emit what an older sink refuses.
"""

from __future__ import annotations

import re
import unicodedata

#: Refused in an id, type or subject: C0 and C1 controls and DEL, line and paragraph
#: separators, bidirectional-text controls (they make a log line read differently from what it
#: holds), and surrogates.
UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
#: Refused in an extension's string value: control characters and surrogates, which the
#: CloudEvents String type excludes (it allows the rest of Unicode).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def is_printable(text: str) -> bool:
    """True if ``text`` holds none of ``UNPRINTABLE``'s characters (printable ASCII fast)."""
    return (text.isascii() and text.isprintable()) or not UNPRINTABLE.search(text)


def breaks_line(ch: str) -> bool:
    """A control character (newline, tab, escape, NUL...), a line or paragraph separator, or
    half of a surrogate pair. Every other character is text, the full-width space included
    (str.isprintable would refuse it, and Japanese text is written with it)."""
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character that ``breaks_line``: printed, it would forge lines
    or drive a terminal."""
    return any(breaks_line(ch) for ch in text)
