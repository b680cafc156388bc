"""Capped exponential backoff with full jitter.

After ``failures`` failures in a row the next wait is drawn uniformly from
``[0, min(cap, base * 2**failures)]``. The jitter spreads relays that failed together (a sink
restart) so they do not come back together; the cap bounds how long an outage is noticed
late. A success resets the count. The random generator is injectable so that a seed makes the
sequence reproducible, and nothing here sleeps: the caller decides how to wait.
"""

from __future__ import annotations

import math
import random

from .exact import is_number

# 2.0 ** 1000 is still a float; beyond that base * 2**failures would overflow, and any sane
# cap has long been reached.
_MAX_EXPONENT = 1000


def _positive(value: object, name: str) -> float:
    if not is_number(value):
        raise ValueError(f"{name}: must be a number of seconds, got {type(value).__name__}")
    if not (0 < value < math.inf):
        raise ValueError(f"{name}: must be a positive finite number of seconds, got {value!r}")
    return float(value)


class Backoff:
    def __init__(
        self, base: float = 0.1, cap: float = 30.0, *, rng: random.Random | None = None
    ) -> None:
        self.base = _positive(base, "base")
        self.cap = _positive(cap, "cap")
        if self.cap < self.base:
            raise ValueError(f"cap: must be at least base ({self.base}s), got {self.cap}s")
        self._rng = rng if rng is not None else random.Random()
        self.failures = 0

    def ceiling(self) -> float:
        """The upper bound of the next wait."""
        return min(self.cap, self.base * 2.0 ** min(self.failures, _MAX_EXPONENT))

    def next_delay(self) -> float:
        """Count one more failure and return how long to wait before trying again."""
        delay = self._rng.uniform(0.0, self.ceiling())
        self.failures += 1
        return delay

    def reset(self) -> None:
        """A success: the next failure starts from ``base`` again."""
        self.failures = 0
