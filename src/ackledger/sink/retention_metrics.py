"""The sink's ``/metrics`` for inbox retention: the durable count of purged receipts and the
oldest receipt's age, read from the database at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from .._core.metric_families import database_counter, database_gauge


class RetentionMetrics(Collector):
    """``read`` answers like ``Inbox.retention``. The age is the oldest receipt's as of the last
    purge (which records it; before any purge, the first receipt's): it grows until a purge
    runs, then falls back to about the horizon (0 for an empty inbox); one that keeps growing
    past the horizon says the scheduled purge is not running. ``purged`` counts every
    process's purges."""

    def __init__(self, read: Callable[[], Mapping[str, float | None]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        found = self._read()
        # Read from the database: the same on every replica (max(), never sum()).
        yield database_counter(
            "ackledger_sink_purged",
            "Receipts deleted by inbox retention (inbox purge, by any process).",
            value=found["purged"] or 0,
        )
        yield database_gauge(
            "ackledger_sink_oldest_receipt_age_seconds",
            "Seconds since the oldest receipt kept by the last inbox purge first arrived (before "
            "any purge, the first receipt; 0 if none).",
            value=found["oldest_receipt_age_s"] or 0.0,
        )
