"""The idempotency keys' Prometheus metrics (``ackledger_idempotency_*``, the ``server`` extra).

This process's counts (``KeyOutcomes``: both faces of the keys count there) are plain counters,
summed across replicas; the keys held in the database, read at scrape time, carry
``scope="database"`` (take ``max()`` across replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .._core.metric_families import database_gauge
from .key_outcomes import KeyOutcomes

PREFIX = "ackledger_idempotency_"
#: (outcome, the counter's name without _total, its help), in ``OUTCOMES`` order.
COUNTERS = (
    ("claimed", "claims", "Keys taken by a first call or request, which then ran."),
    ("replayed", "replays", "Calls and requests answered with a key's stored result."),
    ("in_flight", "in_flight_refusals",
     "Calls refused with InFlight and requests answered 409 while another held the key."),
    ("conflicts", "conflicts",
     "Calls refused with Conflict and requests answered 422: the key with other arguments."),
    ("completed", "completions", "Results and answers stored under a key held."),
)  # fmt: skip


class KeyMetrics(Collector):
    """``outcomes``: this process's counts; ``held``: ``Ledger.key_counts`` (read per scrape)."""

    def __init__(self, outcomes: KeyOutcomes, held: Callable[[], Mapping[str, int]]) -> None:
        self._outcomes = outcomes
        self._held = held

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counts = self._outcomes.snapshot()
        for outcome, name, help_text in COUNTERS:
            yield CounterMetricFamily(PREFIX + name, help_text, value=counts[outcome])
        held = self._held()
        yield database_gauge(
            PREFIX + "keys_in_progress", "Keys held by a call or request still running (or "
            "whose holder died, until its lease runs out).", held["in_progress"],
        )  # fmt: skip
        yield database_gauge(
            PREFIX + "keys_completed",
            "Keys with a stored result, until they expire and are purged.", held["completed"],
        )  # fmt: skip
