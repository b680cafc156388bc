"""The overview's chart: pending and oldest-pending-age, sampled while the console runs.

Samples are taken when the page asks for them (its script fetches ``/samples.json`` every
few seconds), at most one per ``MIN_INTERVAL_S``, so many open pages do not multiply the
database's reads; the last ``KEPT`` samples are kept in memory and nothing is stored.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: About an hour at the page's pace (one fetch every 5 s).
KEPT = 720
MIN_INTERVAL_S = 1.0


class Samples:
    def __init__(self, read: Callable[[], dict[str, Any]], clock: Callable[[], float] = time.time):
        self._read = read
        self._clock = clock
        self._kept: deque[dict[str, float]] = deque(maxlen=KEPT)
        self._lock = threading.Lock()

    def take(self) -> list[dict[str, float]]:
        """A new sample unless the last is younger than ``MIN_INTERVAL_S``; all kept, oldest
        first, each ``{"at", "pending", "oldest_pending_age_s"}``."""
        with self._lock:
            now = self._clock()
            if not self._kept or now - self._kept[-1]["at"] >= MIN_INTERVAL_S:
                figures = self._read()
                self._kept.append(
                    {
                        "at": now,
                        "pending": float(figures["pending"]),
                        "oldest_pending_age_s": float(figures["oldest_pending_age_s"]),
                    }
                )
            return list(self._kept)
