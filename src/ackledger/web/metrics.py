"""A service's Prometheus metrics: durable counters read from its database at scrape time,
and HTTP answers by route and status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request

from .answers import Answer

Handler = Callable[[Request], Awaitable[Answer]]


class _DurableCounters(Collector):
    """Counters kept in the service's database, read at scrape time, so they survive restarts
    and agree with what is on disk."""

    def __init__(
        self, prefix: str, read: Callable[[], Mapping[str, int]], help_texts: Mapping[str, str]
    ) -> None:
        self._prefix = prefix
        self._read = read
        self._help = dict(help_texts)

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self._read()
        for name, help_text in self._help.items():
            family = CounterMetricFamily(self._prefix + name, help_text)
            family.add_metric([], counts.get(name, 0))
            yield family


class ServiceMetrics:
    """A service's metrics: its durable counters, and HTTP answers by route and status."""

    def __init__(
        self, service: str, read: Callable[[], Mapping[str, int]], help_texts: Mapping[str, str]
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_DurableCounters(f"ackledger_{service}_", read, help_texts))
        self.requests = Counter(
            f"ackledger_{service}_requests",
            f"HTTP requests answered by the {service}, by route and status.",
            ["route", "status"],
            registry=self.registry,
        )

    def counted(self, route: str, handler: Handler) -> Handler:
        """``handler``, counting each of its answers under ``route`` and its status."""

        async def counting(request: Request) -> Answer:
            answer = await handler(request)
            self.requests.labels(route, str(answer.status)).inc()
            return answer

        return counting

    def answer(self) -> Answer:
        """The scrape: every metric in the Prometheus text format."""
        return Answer(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
