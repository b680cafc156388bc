"""Durations written the way operators write them: ``30d``, ``12h``, ``90m``, ``45s``, ``2w``."""

from __future__ import annotations

import math
import re

from .exact import is_number

UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
#: The longest age any caller takes (100 years): "now minus it" is still a time a clock, a
#: float and a database can hold.
MAX_SECONDS = 100 * 365 * 86400.0

# One number (whole or decimal) and one unit; no sign, no spaces, no exponent; ASCII digits
# only (\d alone would take other scripts' digits, which no operator means here).
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])", re.ASCII)


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (e.g. ``"7d"`` -> 604800.0); raises ValueError for anything else,
    including zero: every caller uses a duration as an age, and a zero age means "everything"."""
    if not isinstance(text, str):
        raise ValueError(f"duration: must be a string like 30d, got {type(text).__name__}")
    found = _DURATION_RE.fullmatch(text.strip().lower())
    if found is None:
        raise ValueError(
            f"duration: {text!r} is not a number followed by one of s, m, h, d, w (e.g. 30d, 12h)"
        )
    seconds = float(found.group(1)) * UNIT_SECONDS[found.group(2)]
    if seconds <= 0:
        raise ValueError(f"duration: must be greater than zero, got {text!r}")
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"duration: {text!r} is too long (at most 100 years)")
    return seconds


def check_age(value: object, name: str) -> float:
    """A positive number of seconds up to ``MAX_SECONDS`` (an age to subtract from now)."""
    if not is_number(value):
        raise ValueError(f"{name}: must be a number of seconds, got {type(value).__name__}")
    if not 0 < value <= MAX_SECONDS:  # also refuses nan, and ints too large for a float
        raise ValueError(
            f"{name}: must be more than 0 and at most {MAX_SECONDS:.0f} seconds, got {value!r}"
        )
    return float(value)
