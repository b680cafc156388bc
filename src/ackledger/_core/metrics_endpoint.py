"""A /metrics endpoint on its own thread, for the processes that serve no HTTP of their own
(the relay, the consumers): one collector, Prometheus's own small server. Needs
``prometheus_client`` (the ``server`` extra)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from .metric_families import BuildInfo


class MetricsEndpoint:
    def __init__(self, collector: Collector, host: str, port: int, *, component: str) -> None:
        registry = CollectorRegistry()
        registry.register(collector)
        registry.register(BuildInfo(component))
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
