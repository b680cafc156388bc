"""A consumer's /metrics: this process's messages by outcome (the ``server`` extra); all are
this process's own counts, so ``sum()`` them across consumers."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from ..web.metrics_endpoint import MetricsEndpoint
from .consume import OUTCOMES, ConsumeCounts

#: Metric name (``ackledger_consumer_<name>_total``) of each outcome: plural nouns, as the
#: sink's and the ledger's.
_NAMES = {
    "applied": "applied",
    "duplicate": "duplicates",
    "rejected": "rejected",
    "failed": "failed",
}
_HELP = {
    "applied": "Messages whose event the inbox applied, then acknowledged.",
    "duplicate": "Messages whose event the inbox had already applied, acknowledged again.",
    "rejected": "Messages refused for good (invalid, conflict, no handler, Rejected).",
    "failed": "Messages that failed transiently and were left for redelivery.",
}


class ConsumeCollector(Collector):
    def __init__(self, counts: ConsumeCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        for outcome in OUTCOMES:
            yield CounterMetricFamily(
                f"ackledger_consumer_{_NAMES[outcome]}",
                _HELP[outcome],
                value=getattr(self._counts, outcome),
            )


class ConsumeMetrics(MetricsEndpoint):
    """The consumer's /metrics endpoint on its own thread."""

    def __init__(self, counts: ConsumeCounts, host: str, port: int) -> None:
        super().__init__(ConsumeCollector(counts), host, port, component="consumer")
