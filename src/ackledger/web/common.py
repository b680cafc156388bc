"""What both services share: problem JSON (RFC 9457), a capped body reader, JSON answers.

Answers are built once as an :class:`Answer` (status, body, media type, headers) and then
either turned into a Starlette ``Response`` or sent straight on an ASGI ``send``: the hot POST
routes (see ``fastpath``) skip Starlette's request and response objects but say exactly the
same bytes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send

from ..errors import InvalidEvent
from ..event import parse_strict_json
from ..store import Backend

MAX_BODY_BYTES = 64 * 1024
PROBLEM_TYPE_BASE = "https://ackledger.invalid/problems/"


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    media_type: str
    headers: dict[str, str] | None = None

    def response(self) -> Response:
        return Response(
            self.body, status_code=self.status, headers=self.headers, media_type=self.media_type
        )

    async def send(self, send: Send) -> None:
        """Send as ``response()`` would: the same status, headers and body (media types here
        are never text/*, so Starlette adds no charset either)."""
        headers = [
            (b"content-length", str(len(self.body)).encode()),
            (b"content-type", self.media_type.encode("latin-1")),
        ]
        if self.headers:
            headers = [
                *(
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in self.headers.items()
                ),
                *headers,
            ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


def json_answer(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Answer(status, body, "application/json", headers)


def json_response(
    payload: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return json_answer(payload, status, headers).response()


def problem_body(status: int, kind: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": PROBLEM_TYPE_BASE + kind,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


def problem_answer(status: int, kind: str, title: str, detail: str, **extra: Any) -> Answer:
    body = json.dumps(problem_body(status, kind, title, detail, **extra)).encode()
    return Answer(status, body, "application/problem+json")


def problem(status: int, kind: str, title: str, detail: str, **extra: Any) -> Response:
    return problem_answer(status, kind, title, detail, **extra).response()


_ROUTING_PROBLEMS = {
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
}


def build_app(routes: list[BaseRoute], **extra: Any) -> Starlette:
    """A service's Starlette app: problem JSON for unknown routes and methods (with the
    ``extra`` members every answer of the service carries), and no redirect from
    ``/events/`` to ``/events`` (a client that posts to the wrong path should hear so, not be
    sent elsewhere)."""

    async def routing_problem(request: Request, exc: Exception) -> Response:
        # Starlette's own answer is plain text.
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        kind, title = _ROUTING_PROBLEMS.get(status, ("http-error", "HTTP error"))
        path = request.url.path
        detail = (
            f"{request.method} is not allowed on {path}" if status == 405 else f"no route {path}"
        )
        answer = problem(status, kind, title, detail, **extra)
        if isinstance(exc, HTTPException) and exc.headers:
            answer.headers.update(exc.headers)  # the Allow header of a 405
        return answer

    app = Starlette(routes=routes, exception_handlers={HTTPException: routing_problem})
    app.router.redirect_slashes = False
    return app


def too_large_answer(**extra: Any) -> Answer:
    detail = f"the request body is over {MAX_BODY_BYTES} bytes"
    return problem_answer(413, "body-too-large", "Body too large", detail, **extra)


def too_large(**extra: Any) -> Response:
    return too_large_answer(**extra).response()


def invalid_answer(detail: str, field: str | None, **extra: Any) -> Answer:
    if field:
        extra["field"] = field
    return problem_answer(400, "invalid", "Invalid request", detail, **extra)


def invalid(detail: str, field: str | None, **extra: Any) -> Response:
    return invalid_answer(detail, field, **extra).response()


def check_json_type(value: str | None) -> None:
    """Refuse a body not declared as JSON (ValueError naming ``body``, a 400).

    A browser sends a cross-site POST without asking first only for "simple" content types
    (text/plain, forms); requiring application/json makes any page that a user on this
    machine opens unable to post events or ledger requests to a service on loopback.
    """
    media = (value or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ValueError(f"body: Content-Type must be application/json, got {value or 'none'!r}")


async def read_body(scope: Scope, receive: Receive, cap: int = MAX_BODY_BYTES) -> bytes:
    """``read_capped`` for a raw ASGI request: the body, or BodyTooLarge without reading on."""
    declared_type = None
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > cap:
            raise BodyTooLarge
        if name == b"content-type":
            declared_type = value.decode("latin-1")
    check_json_type(declared_type)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def unavailable_answer(exc: Exception, **extra: Any) -> Answer:
    """503 for a request the database failed (a lock waited out, a connection lost): the
    client's retry is safe, since every write here is idempotent. Without it the client got
    Starlette's plain-text 500, without the problem JSON (or the ledger's identity)."""
    detail = (
        f"the database failed ({type(exc).__name__}: {exc}); nothing was acknowledged, "
        "and sending the same request again is safe"
    )
    answer = problem_answer(503, "unavailable", "Database unavailable", detail, **extra)
    return Answer(answer.status, answer.body, answer.media_type, {"Retry-After": "1"})


def bad_input(exc: BodyTooLarge | ValueError, **extra: Any) -> Response:
    """The answer for input refused before anything is written: 413 for a body over the cap,
    else 400 naming the field (an InvalidEvent's own, or ``body`` for unparseable JSON).
    ``extra`` members are added to the problem JSON."""
    if isinstance(exc, BodyTooLarge):
        return too_large(**extra)
    field = exc.field if isinstance(exc, InvalidEvent) and exc.field else "body"
    return invalid(str(exc), field, **extra)


async def read_capped(request: Request, cap: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refusing (without reading it all) anything over ``cap`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    check_json_type(request.headers.get("content-type"))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    """Parse a body; raises ValueError with a message fit for a 400."""
    try:
        # JSON on the wire is UTF-8 (RFC 8259); json.loads(bytes) would also guess UTF-16
        # or UTF-32 and skip a BOM, so two clients could send one event in two encodings.
        return parse_strict_json(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"body: not valid JSON ({exc})") from None
    except RecursionError:
        # 64 KiB of "[" is valid-looking input that nests past the parser's stack.
        raise ValueError("body: JSON nested too deeply") from None


P = ParamSpec("P")
T = TypeVar("T")


class DatabaseCalls:
    """How a service makes its blocking database calls.

    On a backend with a pool of connections (PostgreSQL) each call runs on a worker thread,
    at most as many at once as the pool has connections, so one process has several
    transactions in flight, as several replicas would, and a slow commit or an unreachable
    database does not hold up ``/healthz``. SQLite has one connection and one writer: there
    the calls stay on the event loop, one at a time, which is all the database could do
    anyway, without a thread hop per request. (The ledger uses this; the sink stays on the
    event loop on every backend, for the reason given in web/sink.py.)
    """

    def __init__(self, backend: Backend) -> None:
        self.concurrency = backend.concurrency
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.concurrency <= 1:
            return func(*args, **kwargs)
        if self._limiter is None:  # made on the event loop, which anyio requires
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        return await anyio.to_thread.run_sync(
            functools.partial(func, *args, **kwargs), limiter=self._limiter
        )


def metrics_response(registry: CollectorRegistry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


Handler = Callable[[Request], Awaitable[Response]]


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

        async def counting(request: Request) -> Response:
            response = await handler(request)
            self.requests.labels(route, str(response.status_code)).inc()
            return response

        return counting

    def response(self) -> Response:
        return metrics_response(self.registry)
