"""Times as operators read them: UTC to the second, whatever the machine's time zone."""

from __future__ import annotations

import time


def utc_timestamp(at: object) -> str:
    """Seconds since the epoch as ``2026-12-01T10:00:00Z``; ``?`` when a row holds no time."""
    if not isinstance(at, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(at)))
