"""A consumer's /metrics: this process's messages by outcome (the ``server`` extra)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from .consume import OUTCOMES, ConsumeCounts

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
                f"ackledger_consume_{outcome}", _HELP[outcome], value=getattr(self._counts, outcome)
            )


class ConsumeMetrics:
    """The consumer's /metrics endpoint on its own thread."""

    def __init__(self, counts: ConsumeCounts, host: str, port: int) -> None:
        registry = CollectorRegistry()
        registry.register(ConsumeCollector(counts))
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host = host
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if isinstance(self._thread, threading.Thread):
            self._thread.join(timeout=5)
