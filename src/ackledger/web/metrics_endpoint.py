"""A /metrics endpoint on its own thread, for the processes that serve no HTTP of their own
(the relay, the consumers): one collector, Prometheus's own small server. Needs
``prometheus_client`` (the ``server`` extra).

Bound to loopback, it answers only requests addressed to a loopback name, as the services do
(CONTRACT v2 section 9): a page whose DNS name was rebound to 127.0.0.1 gets 421, not the
figures."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from .._core.metric_families import BuildInfo
from .guard import is_loopback_address, loopback_host


class MetricsEndpoint:
    def __init__(self, collector: Collector, host: str, port: int, *, component: str) -> None:
        registry = CollectorRegistry()
        registry.register(collector)
        registry.register(BuildInfo(component))
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        app = self._server.get_app()
        if app is not None and is_loopback_address(host.strip("[]")):
            self._server.set_app(_loopback_only(app))
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


WsgiApp = Callable[[dict[str, Any], Any], Iterable[bytes]]


def _loopback_only(app: WsgiApp) -> WsgiApp:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST")
        if host is not None and not loopback_host(host.encode("latin-1")):
            body = b"421 Misdirected Request: this endpoint answers loopback names only\n"
            start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
            return [body]
        return app(environ, start_response)

    return guarded
