"""The relay's Prometheus metrics, read at scrape time from the relay and its outbox.

Outbox figures (pending, oldest pending age, quarantined, attempts, sent) come from
``stats()`` on every scrape, so they are the database's truth even across relay restarts;
they carry ``scope="database"``: every replica reports the same figures, so take ``max()``
across replicas. Send figures are this process's own counters: ``sum()`` them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .._core.metric_families import database_counter, database_gauge
from ..web.metrics_endpoint import MetricsEndpoint
from .loop import RelayCounts

#: Reads the outbox's figures (``Outbox.stats``).
Stats = Callable[[], dict[str, Any]]


class RelayCollector(Collector):
    """Serves the one relay loop, on the whole outbox or on leased partitions (RelayCounts)."""

    def __init__(self, stats: Stats, counts: RelayCounts) -> None:
        self._stats = stats
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self._stats()
        counts = self._counts
        yield _database_gauge(
            "pending", "Events waiting to be sent now (not quarantined).", stats["pending"]
        )
        yield _database_gauge(
            "oldest_pending_age_seconds",
            "Age of the oldest pending event; grows while the head is stuck.",
            stats["oldest_pending_age_s"],
        )
        yield _database_gauge(
            "quarantined", "Events held out of pending by quarantine (never sent).",
            stats["quarantined"],
        )  # fmt: skip
        yield database_counter(
            "ackledger_relay_outbox_attempts",
            "Send attempts recorded in the outbox by any relay or dispatch.", stats["attempts"],
        )  # fmt: skip
        yield database_counter(
            "ackledger_relay_outbox_sent", "Events marked sent in the outbox, ever.", stats["sent"]
        )
        yield _counter("sends_attempted", "Event sends this relay attempted.", counts.attempted)
        yield _counter("sends_succeeded", "Event sends acknowledged by the sink.", counts.succeeded)
        yield _counter(
            "sends_succeeded_without_identity",
            "Of those, acknowledged by a 2xx without identity (--ack status): the receiver "
            "named no event.", counts.without_identity,
        )  # fmt: skip
        yield _by_label(
            "sends_failed", "Event sends that failed, by class (transient: retried; "
            "permanent: a 4xx).", "class", counts.failed,
        )  # fmt: skip
        yield _by_label(
            "poison_alerts", "Permanent failures alerted on, by the action taken.", "action",
            counts.poison,
        )  # fmt: skip
        yield _counter(
            "store_errors", "Rounds that failed in the outbox store, not the network.",
            counts.store_errors,
        )  # fmt: skip
        yield _gauge(
            "consecutive_failures", "Failed rounds since the last success.",
            counts.consecutive_failures,
        )  # fmt: skip
        yield _gauge(
            "backoff_seconds", "The current backoff wait (0 when healthy).", counts.backoff_s
        )


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"ackledger_relay_{name}", help_text, value=value)


def _database_gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return database_gauge(f"ackledger_relay_{name}", help_text, value)


def _by_label(name: str, help_text: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(f"ackledger_relay_{name}", help_text, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"ackledger_relay_{name}", help_text, value=value)


class MetricsServer(MetricsEndpoint):
    """The relay's /metrics endpoint on its own thread."""

    def __init__(self, stats: Stats, counts: RelayCounts, host: str, port: int) -> None:
        super().__init__(RelayCollector(stats, counts), host, port, component="relay")
