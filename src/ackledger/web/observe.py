"""Every HTTP request of a service, timed once: the latency histogram by route template, and
the access log line.

It wraps the whole app, the hot POST routes (``fastpath``) included, so no route is left out.
Labels come from fixed sets only: the route's template (``/events/{event_id}``, never the id
itself; ``unmatched`` for a path no route knows), a known method or ``other``, and the status.
The access log never sees headers (so never a token), only method, path, status and time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._core.logline import log_event

#: The access log: quiet unless ``--access-log`` sets it to INFO (``web.server``).
ACCESS_LOG = logging.getLogger("ackledger.access")

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: From a sink's sub-millisecond answer on the event loop to a ledger waiting out a lock.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Observed:
    """``app``, with each request's latency observed and its access line logged."""

    def __init__(
        self, app: ASGIApp, registry: CollectorRegistry, routes: Sequence[BaseRoute]
    ) -> None:
        self.app = app
        self._routes = list(routes)
        # Paths without parameters are looked up directly; only the others are matched.
        self._fixed = {
            route.path: route.path_format
            for route in self._routes
            if isinstance(route, Route) and not route.param_convertors
        }
        self._seconds = Histogram(
            "ackledger_http_request_duration_seconds",
            "Time from a request's arrival to its answer, by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
            buckets=_BUCKETS,
        )
        self._children: dict[tuple[str, str, int], Any] = {}

    def template(self, scope: Scope) -> str:
        fixed = self._fixed.get(scope["path"])
        if fixed is not None:
            return fixed
        for route in self._routes:
            if route.matches(scope)[0] is not Match.NONE:
                return str(getattr(route, "path_format", scope["path"]))
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def answering(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, answering)
        except BaseException:
            status = status or 500  # what uvicorn answers for an app that raised
            raise
        finally:
            if status:  # else the client went away before anything was answered
                self._observe(scope, status, time.perf_counter() - started)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        method = scope["method"] if scope["method"] in _METHODS else "other"
        route = self.template(scope)
        key = (route, method, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._seconds.labels(route, method, str(status))
        child.observe(seconds)
        if ACCESS_LOG.isEnabledFor(logging.INFO):
            path = scope["path"]
            log_event(
                ACCESS_LOG, logging.INFO, "request", f"{scope['method']} {path} {status}",
                method=scope["method"], path=path, route=route, status=status,
                duration_ms=round(seconds * 1000, 3),
            )  # fmt: skip
