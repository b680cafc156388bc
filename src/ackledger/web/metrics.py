"""A service's Prometheus metrics: durable counters read from its database at scrape time,
request latency by route template, and the build.

Naming (docs/operations.md): ``ackledger_<component>_<what>``, ``_total`` on counters, base
units (``_seconds``), labels from small fixed sets only. Figures read from the database carry
``scope="database"``: every replica reads the same rows, so dashboards take ``max()`` of them
across replicas, and ``sum()`` only of the others (this process's own counts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from .._core.metric_families import BuildInfo, database_counter
from .answers import Answer


class DurableCounters(Collector):
    """Counters kept in a database, read at scrape time, so they survive restarts and agree
    with what is on disk; labelled ``scope="database"``."""

    def __init__(
        self, prefix: str, read: Callable[[], Mapping[str, int]], help_texts: Mapping[str, str]
    ) -> None:
        self._prefix = prefix
        self._read = read
        self._help = dict(help_texts)

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self._read()
        for name, help_text in self._help.items():
            yield database_counter(self._prefix + name, help_text, counts.get(name, 0))


class ServiceMetrics:
    """A service's registry: its durable counters, its build, and (``web.observe``) its HTTP
    requests by route template."""

    def __init__(
        self, service: str, read: Callable[[], Mapping[str, int]], help_texts: Mapping[str, str]
    ) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        self.registry.register(DurableCounters(f"ackledger_{service}_", read, help_texts))
        self.registry.register(BuildInfo(service))

    def answer(self) -> Answer:
        """The scrape: every metric in the Prometheus text format."""
        return Answer(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
