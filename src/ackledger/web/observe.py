"""Every HTTP request of a service, timed once: the latency histogram by route template, and
the access log line.

It wraps the whole app, the hot POST routes (``fastpath``) included, so no route is left out:
those it calls itself (``direct``), which saves the router and a wrapper around every ``send``
of theirs on the sink's per-event path.
Labels come from fixed sets only: the route's template (``/events/{event_id}``, never the id
itself; ``unmatched`` for a path no route knows), a known method or ``other``, and the status.
The access log never sees headers (so never a token), only method, path, status and time.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._core.logline import log_event
from .fastpath import PostRoute

#: The access log: quiet unless ``--access-log`` sets it to INFO (``web.server``).
ACCESS_LOG = logging.getLogger("ackledger.access")

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: From a sink's sub-millisecond answer on the event loop to a ledger waiting out a lock.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Latencies(Collector):
    """``ackledger_http_request_duration_seconds``, counted here rather than by
    prometheus_client's ``Histogram``: its ``observe`` takes a lock per bucket and cost about
    6 us a request on the loaded test machine, which is a real share of the sink's hot POST.
    Every observation is made on the event loop's thread, so plain integers do; a scrape
    from another thread reads them as they are at that moment."""

    def __init__(self) -> None:
        #: (route, method, status) -> [count per bucket..., count above the last, sum]
        self.series: dict[tuple[str, str, str], list[float]] = {}

    def observe(self, key: tuple[str, str, str], seconds: float) -> None:
        counts = self.series.get(key)
        if counts is None:
            counts = self.series[key] = [0] * (len(_BUCKETS) + 2)
        counts[bisect_left(_BUCKETS, seconds)] += 1
        counts[-1] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "ackledger_http_request_duration_seconds",
            "Time from a request's arrival to its answer, by route template, method and status.",
            labels=["route", "method", "status"],
        )
        for key, counts in list(self.series.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip([*map(str, _BUCKETS), "+Inf"], counts[:-1], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(list(key), buckets, counts[-1])
        yield family


class Observed:
    """``app``, with each request's latency observed and its access line logged.

    ``direct`` maps exact paths to the POST routes answered here without ``app``'s router (a
    mounted app, which has a ``root_path``, is routed by ``app`` as every other request).
    """

    def __init__(
        self,
        app: ASGIApp,
        registry: CollectorRegistry,
        routes: Sequence[BaseRoute],
        direct: Mapping[str, PostRoute] | None = None,
    ) -> None:
        self.app = app
        self._direct = dict(direct or {})
        self._routes = list(routes)
        # Paths without parameters are looked up directly; only the others are matched.
        self._fixed = {
            route.path: route.path_format
            for route in self._routes
            if isinstance(route, Route) and not route.param_convertors
        }
        self._latencies = _Latencies()
        registry.register(self._latencies)
        #: The histogram's key of the usual answers of the POST routes called here, made once.
        self._direct_keys = {
            (path, status): (self._fixed[path], "POST", str(status))
            for path in self._direct
            if path in self._fixed
            for status in (200, 400, 413, 422, 503)
        }

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
        if scope["method"] == "POST" and not scope.get("root_path"):
            route = self._direct.get(scope["path"])
            if route is not None:
                # Called here rather than in a coroutine of its own: each level is resumed
                # again when the group commit answers.
                answered = 0
                try:
                    answered = await route.respond(scope, receive, send)
                except BaseException:
                    answered = 500  # what uvicorn answers for an app that raised before its answer
                    raise
                finally:
                    if answered:
                        self.observe_direct(scope["path"], answered, started)
                return
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
                method, path = scope["method"], scope["path"]
                seconds = time.perf_counter() - started
                self._observe(method, path, self.template(scope), status, seconds)

    def observe_direct(self, path: str, status: int, started: float) -> None:
        """Time (and log) a POST answered by one of the routes called here."""
        seconds = time.perf_counter() - started
        key = self._direct_keys.get((path, status))
        if key is None or ACCESS_LOG.isEnabledFor(logging.INFO):
            self._observe("POST", path, self._fixed.get(path, path), status, seconds)
        else:
            self._latencies.observe(key, seconds)

    def _observe(self, method: str, path: str, route: str, status: int, seconds: float) -> None:
        method = method if method in _METHODS else "other"
        self._latencies.observe((route, method, str(status)), seconds)
        if ACCESS_LOG.isEnabledFor(logging.INFO):
            log_event(
                ACCESS_LOG, logging.INFO, "request", f"{method} {path} {status}",
                method=method, path=path, route=route, status=status,
                duration_ms=round(seconds * 1000, 3),
            )  # fmt: skip
