"""Sending events over HTTP to a sink: kept-alive connections and the POSTs of the hot path.

Targets are checked first (``targets``), before any connection or name look-up. A request is
one write of head and body on a connection kept per thread and host, Nagle's algorithm off;
the answer is read by a kept parser (llhttp through ``httptools`` when it imports, else
``http.client``) under the rules of ``framing``, and judged by ``ack``. Proxy variables are
never read and redirects never followed: any status but 200 is a refusal carrying it.

A connection is discarded after any error, or when the answer says ``Connection: close``
(or is HTTP/1.0). A kept connection that the server has closed is noticed *before* sending,
never retried after: a send either happened once on this call or raised. Connection failures,
time-outs and an answer cut short raise ``OSError``. The time-out bounds the whole call
(connect, send and every read together), not each read: a server that drips one byte a second
cannot hold a sender past it.
``request_once`` (operator tools, one request each) stays on ``http.client``.
"""

from __future__ import annotations

import functools
import http.client
import math
import select
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..envelope import validate_encoded
from ..errors import NotAcknowledged
from .ack import BatchAnswer, acked_prefix, answer_json, check_ack, exact_ack, status_ack
from .framing import MAX_ANSWER_BYTES
from .stored import Stored
from .targets import ANY_PATH, Target, check_target, check_timeout
from .token import Token, as_token

try:
    from ._llhttp import kept_answer, read_answer
except ImportError:  # httptools comes with the server extra; the core does without it
    from ._stdlib import kept_answer, read_answer

MAX_BATCH = 16

_local = threading.local()


class _Connection:
    """One kept-alive connection to a sink, Nagle's algorithm off (a request is one write, but
    an ACK must not wait for a delayed ACK of the previous one either way), and the answer
    reader kept with it (llhttp's parser carries on from one answer to the next).

    The socket is non-blocking once connected, and every wait is a ``poll`` for at most the
    time left until the call's deadline (``end``, set by ``_post`` for each call), so the
    time-out bounds the whole call: a server that drips one byte a second cannot hold a
    sender past it. A socket with a time-out would need its time-out lowered before each read
    and restored after it (an ``ioctl`` each in CPython's ``settimeout``): the per-item
    relay's answer would cost nine system calls instead of four."""

    __slots__ = ("answer", "end", "poller", "sock", "timeout")

    def __init__(self, target: Target, timeout: float) -> None:
        self.sock = socket.create_connection((target.host, target.port), timeout=timeout)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.setblocking(False)
            self.poller = select.poll()
            self.poller.register(self.sock, select.POLLIN)
        except BaseException:
            self.sock.close()
            raise
        self.answer = kept_answer()
        self.timeout = timeout
        self.end = 0.0

    def _wait(self, events: int) -> None:
        """Return once the socket is ready for ``events`` (or has failed); TimeoutError when
        the deadline passes first."""
        poller = self.poller
        if events != select.POLLIN:
            poller.modify(self.sock, events)
        try:
            while True:
                left = self.end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no complete answer within the {self.timeout:g} s time-out")
                # Rounded up, as CPython rounds a socket's own time-out for poll().
                if poller.poll(math.ceil(left * 1000)):
                    return
        finally:
            if events != select.POLLIN:
                poller.modify(self.sock, select.POLLIN)

    def sendall(self, data: bytes) -> None:
        # A request (a few hundred bytes into an idle connection's empty buffer) nearly always
        # goes in one send: the view and its slices are made only for what is left.
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self._send_rest(memoryview(data)[sent:])

    def _send_rest(self, view: memoryview) -> None:
        sock = self.sock
        while view:
            try:
                view = view[sock.send(view) :]
            except BlockingIOError:  # the send buffer is full: wait until it drains
                self._wait(select.POLLOUT)

    def recv(self, size: int) -> bytes:
        # The answer is never there yet when asked for: wait first, then read. ``_wait`` for
        # reading, inline (once an answer, and the poller is registered for reading already).
        while True:
            left = self.end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete answer within the {self.timeout:g} s time-out")
            # Rounded up, as CPython rounds a socket's own time-out for poll().
            if self.poller.poll(math.ceil(left * 1000)):
                try:
                    return self.sock.recv(size)
                except BlockingIOError:  # woken without data (a spurious wake-up): wait again
                    continue

    def close(self) -> None:
        self.sock.close()


def _pool() -> dict[tuple[str, int], _Connection]:
    pool: dict[tuple[str, int], _Connection] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = {}
        _local.pool = pool
    return pool


def _connection(key: tuple[str, int], target: Target, timeout: float) -> _Connection:
    """This thread's kept connection to ``key`` (the target's host and port), unless the
    server has closed it; else a new one."""
    pool = getattr(_local, "pool", None) or _pool()  # ``_pool()``, inline: once a request
    conn = pool.get(key)
    # A kept socket readable before we sent anything holds EOF or junk (or has failed:
    # POLLHUP and POLLERR are always reported): it is not fit to carry a request.
    if conn is not None and conn.poller.poll(0):
        del pool[key]
        conn.close()
        conn = None
    if conn is None:
        conn = _Connection(target, timeout)  # the time-out bounds the connect
        pool[key] = conn
    return conn


def _discard(target: Target) -> None:
    conn = _pool().pop((target.host, target.port), None)
    if conn is not None:
        conn.close()


def close_connections() -> None:
    """Close this thread's kept-alive connections."""
    pool = _pool()
    for conn in pool.values():
        conn.close()
    pool.clear()


#: CloudEvents structured mode (CONTRACT section 5): one event, and a batch of them.
STRUCTURED = b"application/cloudevents+json"
BATCH = b"application/cloudevents-batch+json"


_LENGTH = b"Content-Length: "


@functools.lru_cache(maxsize=256)
def _request_head(target: Target, content_type: bytes, authorization: bytes = b"") -> bytes:
    """Everything of a POST's head up to the value of Content-Length (fixed per target and
    token; ``authorization`` is the whole header line, or empty)."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    try:
        host_bytes = host.encode("ascii")
    except UnicodeEncodeError:
        host_bytes = host.encode("idna")
    return (
        b"POST " + target.path.encode("ascii") + b" HTTP/1.1\r\n"
        b"Host: " + host_bytes + b":" + str(target.port).encode() + b"\r\n"
        # Without Accept-Encoding a server may pick any coding; only plain JSON is understood.
        b"Accept-Encoding: identity\r\n"
        b"Content-Type: " + content_type + b"\r\n"
        b"Accept: application/json\r\n" + authorization + _LENGTH
    )


def _authorization(token: Token | None) -> bytes:
    return b"" if token is None else b"Authorization: " + token.header() + b"\r\n"


def _trace_headers(event: Mapping[str, Any]) -> bytes:
    """The event's W3C trace context as HTTP headers (CONTRACT §10), so a tracing proxy or
    server finds it where it looks; the values were checked as W3C values (printable ASCII)."""
    lines = b""
    for name in ("traceparent", "tracestate"):
        value = event.get(name)
        if isinstance(value, str):
            lines += name.encode() + b": " + value.encode("ascii") + b"\r\n"
    return lines


class Route:
    """Where and how one kind of POST goes, checked once: the target, the request's head up
    to the value of Content-Length (fixed per target, content type and token), the pool's key
    and the time-out. A relay sends every event the same way: ``route`` makes this once per
    URL and options, not once per event."""

    __slots__ = ("head", "key", "target", "timeout")

    def __init__(
        self, target: Target, content_type: bytes, token: Token | None, timeout: float
    ) -> None:
        self.target = target
        self.key = (target.host, target.port)
        self.timeout = timeout
        self.head = _request_head(target, content_type, _authorization(token))


#: A route's options: the allowed hosts, the token, the time-out and its type (a time-out of
#: True must not find the route made for 1: the check refuses a bool).
_Options = tuple[tuple[str, ...] | None, Token | str | None, object, type]


def route(
    url: object,
    path: str | None,
    content_type: bytes,
    *,
    allowed_hosts: Iterable[str] | None,
    token: Token | str | None,
    timeout: object,
) -> Route:
    """The checked ``Route`` for these options (UnsafeTarget, ValueError or TypeError naming
    what is wrong, before any connection): made once and kept for options seen before."""
    hosts = None if allowed_hosts is None else tuple(allowed_hosts)
    options = (hosts, token, timeout, type(timeout))
    try:
        return _kept_route(url, path, content_type, options)
    except TypeError:
        # Something unhashable (or a host that is not a string): the checks name it.
        return _new_route(url, path, content_type, options)


def _new_route(url: object, path: str | None, content_type: bytes, options: _Options) -> Route:
    hosts, token, timeout, _ = options
    target = check_target(url, path, hosts)
    bearer = as_token(token)
    return Route(target, content_type, bearer, check_timeout(timeout))


_kept_route = functools.lru_cache(maxsize=256)(_new_route)


def _post(how: Route, body: bytes, extra: bytes = b"") -> tuple[int, bytes, bytes | None]:
    """POST ``body`` the way ``how`` says and return (status, body, ``Retry-After``), for the
    caller to judge; raises NotAcknowledged for unusable answers. ``extra`` is header lines to
    send as well."""
    started = time.monotonic()
    conn = _connection(how.key, how.target, how.timeout)
    try:
        # The call's deadline: every wait of this call ends by it.
        conn.end = started + how.timeout
        conn.timeout = how.timeout
        head = how.head
        if extra:  # the head ends in "Content-Length: ": the lines go before it
            head = head[: -len(_LENGTH)] + extra + _LENGTH
        # One write: head and body together, so neither waits for the other's ACK.
        conn.sendall(head + b"%d\r\n\r\n" % len(body) + body)
        status, data, keep, wait = read_answer(conn, conn.answer)
    except BaseException:
        # Whatever went wrong, the connection's state is unknown: never reuse it. Connection
        # failures and time-outs propagate as the OSErrors they are.
        _discard(how.target)
        raise
    if not keep:
        _discard(how.target)
    return status, data, wait


class _OnceConnection(http.client.HTTPConnection):
    """``http.client`` writes a request's head and body in two ``send`` calls; with Nagle's
    algorithm on, the body can wait for the peer's ACK of the head. Turn it off."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def request_once(
    target: Target,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    timeout: float = 5.0,
    cap: int = MAX_ANSWER_BYTES,
    token: Token | str | None = None,
) -> tuple[int, bytes]:
    """One request on its own connection (workers and operator tools ask once): returns
    (status, body), the body read up to ``cap``; connection errors raise as OSError."""
    bearer = as_token(token)
    conn = _OnceConnection(target.host, target.port, timeout=check_timeout(timeout))
    try:
        headers = {"Accept": "application/json, text/plain"}
        if bearer is not None:
            headers["Authorization"] = bearer.header().decode("ascii")
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(cap + 1)
    except http.client.HTTPException as exc:
        if isinstance(exc, OSError):  # RemoteDisconnected: a connection failure, kept as one
            raise
        raise NotAcknowledged(f"malformed HTTP answer: {type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    if len(data) > cap:
        raise NotAcknowledged(f"answer body over {cap} bytes; not read further", status=0)
    return response.status, data


def send_http(
    event: object,
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
    ack: str = "exact",
) -> bool:
    """POST one event to a sink at ``url`` (any path: ``/events``, or where the sink is
    mounted) in structured mode; returns True only for an exact ACK of its identity
    (``ack="status"``: for any 2xx). ``timeout`` bounds the whole call; ``token`` is sent as
    ``Authorization: Bearer``."""
    check_ack(ack)
    clean, text = validate_encoded(event)
    return post_event(event_route(url, allowed_hosts, token, timeout), clean, text, ack)


def event_route(
    url: object, allowed_hosts: Iterable[str] | None, token: Token | str | None, timeout: object
) -> Route:
    """The ``Route`` of single events to the sink at ``url`` (any path: a mounted sink's too)."""
    return route(
        url, ANY_PATH, STRUCTURED, allowed_hosts=allowed_hosts, token=token, timeout=timeout
    )


def post_event(how: Route, event: Mapping[str, Any], text: str, ack: str = "exact") -> bool:
    """POST one event whose JSON is ``text`` (its canonical JSON: the validated event's, or
    the outbox's stored one); True only for the exact ACK of ``event`` (``ack="status"``:
    any 2xx)."""
    # Canonical JSON writes every key as it is: where no '"trace' occurs in the text, the
    # event has neither ``traceparent`` nor ``tracestate``, and nothing needs looking up.
    extra = _trace_headers(event) if '"trace' in text else b""
    status, data, wait = _post(how, text.encode(), extra)
    if ack == "status":
        return status_ack(status, data, wait)
    return exact_ack(status, answer_json(status, data, wait), event)


def post_batch(
    events: Sequence[object],
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
    ack: str = "exact",
) -> BatchAnswer:
    """POST 1-16 events to ``url`` (a sink's batch URL, any path: ``/events/batch``, or
    the mounted sink's) and read which prefix was acknowledged."""
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise ValueError("events: must be a list of 1-16 events")
    if not 1 <= len(events) <= MAX_BATCH:
        raise ValueError(f"events: must hold 1-{MAX_BATCH} events, got {len(events)}")
    encoded = [validate_encoded(item) for item in events]
    body = "[" + ",".join(text for _, text in encoded) + "]"
    sent = [event for event, _ in encoded]
    return _post_batch_body(
        body, sent, url, timeout=timeout, allowed_hosts=allowed_hosts, token=token, ack=ack
    )


def post_stored_batch(
    events: Sequence[Stored],
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
    ack: str = "exact",
) -> BatchAnswer:
    """``post_batch`` of events as the outbox stored them (``wire/stored.py``): their stored
    text, validated when they were published, is the batch's body as it is."""
    if not 1 <= len(events) <= MAX_BATCH:
        raise ValueError(f"events: must hold 1-{MAX_BATCH} events, got {len(events)}")
    body = "[" + ",".join(event.text for event in events) + "]"
    sent = [event.attributes for event in events]
    return _post_batch_body(
        body, sent, url, timeout=timeout, allowed_hosts=allowed_hosts, token=token, ack=ack
    )


def _post_batch_body(
    body: str,
    sent: Sequence[Mapping[str, Any]],
    url: str,
    *,
    timeout: float,
    allowed_hosts: Iterable[str] | None,
    token: Token | str | None,
    ack: str,
) -> BatchAnswer:
    """POST a batch's JSON ``body``; the answer is judged against the events ``sent`` (under
    ``ack="status"``, a 2xx acknowledges the whole batch)."""
    how = route(url, ANY_PATH, BATCH, allowed_hosts=allowed_hosts, token=token, timeout=timeout)
    status, data, wait = _post(how, body.encode())
    if check_ack(ack) == "status":
        status_ack(status, data, wait)
        return BatchAnswer(len(sent), None)
    return acked_prefix(status, answer_json(status, data, wait), sent)


def send_http_batch(
    events: Sequence[object],
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    token: Token | str | None = None,
    ack: str = "exact",
) -> int:
    """POST up to 16 events; returns the length of the acknowledged prefix (``ack="status"``:
    all of them on any 2xx)."""
    answer = post_batch(
        events, url, timeout=timeout, allowed_hosts=allowed_hosts, token=token, ack=ack
    )
    return answer.acked
