"""Durations as operators type them: ``7d``, ``12h``, ``30m``, ``45s``, ``1h30m``."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# One or more "<number><unit>" parts; ms is listed before m so that "5ms" is not "5m" + "s".
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (e.g. ``7d``, ``12h``, ``1h30m``, ``0.5s``); raises ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"duration: must be a string like 7d, got {type(text).__name__}")
    compact = text.strip().lower()
    if not compact:
        raise ValueError("duration: empty; use a number and a unit, e.g. 7d, 12h, 30m, 45s")
    position = 0
    total = 0.0
    for match in _PART.finditer(compact):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(compact):
        raise ValueError(
            f"duration: cannot read {text!r}; use a number and a unit "
            "(ms, s, m, h, d, w), e.g. 7d, 12h, 30m, 1h30m"
        )
    if not math.isfinite(total):
        raise ValueError(f"duration: {text!r} is too large")
    return total
