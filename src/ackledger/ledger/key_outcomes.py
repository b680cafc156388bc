"""What the idempotency keys of this process did: claimed, replayed, refused, completed.

One ``KeyOutcomes`` per ``Ledger``, counted by both faces (``@ledger.idempotent`` and the
middlewares) as each call or request learns its key's fate; the ledger's ``/metrics`` serves
them (``ledger.key_metrics``). They are this process's own counts, summed across replicas; the
keys held in the database are read at scrape time instead (``Ledger.key_counts``).
"""

from __future__ import annotations

import threading

from ..store.idempotency_keys import Found

#: The counts, in the order the metrics list them.
OUTCOMES = ("claimed", "replayed", "in_flight", "conflicts", "completed")


class KeyOutcomes:
    """Thread-safe counters of what the keys did (see ``OUTCOMES``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(OUTCOMES, 0)

    def add(self, outcome: str) -> None:
        if outcome not in self._counts:
            raise ValueError(f"outcome: one of {', '.join(OUTCOMES)}, got {outcome!r}")
        with self._lock:
            self._counts[outcome] += 1

    def found(self, found: Found) -> None:
        """Counts a claim's final answer: the key taken, its answer replayed, refused while
        another holds it, or refused for other arguments."""
        self.add(_BY_FOUND[found])

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


_BY_FOUND = {
    Found.CLAIMED: "claimed",
    Found.COMPLETED: "replayed",
    Found.IN_FLIGHT: "in_flight",
    Found.CONFLICT: "conflicts",
}
