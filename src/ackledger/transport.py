"""Sending events over HTTP to a sink, safely.

Only allow-listed loopback ``/events`` URLs are accepted, checked before any connection or
name look-up. ``http.client`` is used directly: it never reads proxy variables and never
follows redirects, so neither can happen by accident. Answers are read up to a cap, and only
an exact ACK naming the same id counts. Connections are kept alive per thread and host, and a
kept connection that the server has closed is noticed *before* sending, never retried after:
a send either happened once on this call or raised.
"""

from __future__ import annotations

import functools
import http.client
import json
import select
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import NotAcknowledged, UnsafeTarget
from .event import event_json, validate_event

MAX_ANSWER_BYTES = 64 * 1024
MAX_BATCH = 16
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str


def check_target(
    url: object, path: str = "/events", allowed_hosts: Iterable[str] | None = None
) -> Target:
    """Parse ``url`` or raise :class:`UnsafeTarget`; makes no connection and no DNS query."""
    if not isinstance(url, str):
        raise UnsafeTarget(f"url: must be a string, got {type(url).__name__}")
    hosts = None if allowed_hosts is None else tuple(allowed_hosts)
    # A relay sends every event to the same URL: parse it once, not once per event.
    return _check_target(url, path, hosts)


@functools.lru_cache(maxsize=256)
def _check_target(url: str, path: str, allowed_hosts: tuple[str, ...] | None) -> Target:
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise UnsafeTarget("url: must not contain whitespace or control characters")
    if "?" in url or "#" in url:
        raise UnsafeTarget("url: a query or fragment is not allowed")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeTarget(f"url: cannot be parsed: {exc}") from None
    if parts.scheme != "http":
        raise UnsafeTarget(f"url: only http:// is allowed, got {parts.scheme or 'none'!r}")
    if "@" in parts.netloc:
        raise UnsafeTarget("url: user information is not allowed")
    host = (parts.hostname or "").lower()
    allowed = LOOPBACK_HOSTS | {h.lower() for h in (allowed_hosts or ())}
    if host not in allowed:
        raise UnsafeTarget(
            f"url: host {host or '(none)'!r} is not allowed (allowed: 127.0.0.1, localhost, [::1]"
            " and any host given explicitly)"
        )
    if parts.path != path:
        raise UnsafeTarget(f"url: the path must be exactly {path}, got {parts.path or '/'!r}")
    return Target(host, port if port is not None else 80, path)


_local = threading.local()


def _pool() -> dict[tuple[str, int], http.client.HTTPConnection]:
    pool: dict[tuple[str, int], http.client.HTTPConnection] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = {}
        _local.pool = pool
    return pool


def _is_dropped(conn: http.client.HTTPConnection) -> bool:
    sock = conn.sock
    if sock is None:
        return True
    # A kept-alive socket that is readable before we sent anything holds either EOF or junk:
    # either way it is not fit to carry a request.
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


class _Connection(http.client.HTTPConnection):
    """``http.client`` writes a request's head and body in two ``send`` calls; with Nagle's
    algorithm on, the body can wait for the peer's ACK of the head. Turn it off."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _connection(target: Target, timeout: float) -> http.client.HTTPConnection:
    key = (target.host, target.port)
    pool = _pool()
    conn = pool.get(key)
    if conn is not None and _is_dropped(conn):
        conn.close()
        conn = None
    if conn is None:
        conn = _Connection(target.host, target.port, timeout=timeout)
        pool[key] = conn
    if conn.timeout != timeout:
        # settimeout is a system call; a relay keeps one timeout, so it is made once.
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
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


def _post_json(target: Target, body: bytes, timeout: float) -> tuple[int, Any]:
    """POST and return (status, parsed JSON); raises NotAcknowledged for unusable answers."""
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    conn = _connection(target, float(timeout))
    try:
        conn.request(
            "POST",
            target.path,
            body=body,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        response = conn.getresponse()
        status = response.status
        declared = response.getheader("Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_ANSWER_BYTES):
            raise NotAcknowledged(
                f"answer body too large or malformed length ({declared!r} bytes, cap "
                f"{MAX_ANSWER_BYTES})",
                status=status,
            )
        data = response.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            raise NotAcknowledged(
                f"answer body over {MAX_ANSWER_BYTES} bytes; not read further", status=status
            )
        if not response.isclosed() and response.read(1):
            # Anything left unread would poison the next request on this connection.
            raise NotAcknowledged("answer body longer than declared", status=status)
        if response.will_close:
            _discard(target)
    except OSError:
        # Connection failures and time-outs (RemoteDisconnected included) stay OSErrors.
        _discard(target)
        raise
    except http.client.HTTPException as exc:
        _discard(target)
        raise NotAcknowledged(f"malformed HTTP answer: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        _discard(target)
        raise
    if status != 200:
        raise NotAcknowledged(_status_message(status, data), status=status)
    try:
        return status, json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise NotAcknowledged("answer is not valid JSON", status=status) from None


def request_once(
    target: Target,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    timeout: float = 5.0,
    cap: int = MAX_ANSWER_BYTES,
) -> tuple[int, bytes]:
    """One request on its own connection (workers and operator tools ask once): returns
    (status, body), the body read up to ``cap``; connection errors raise as OSError."""
    conn = _Connection(target.host, target.port, timeout=timeout)
    try:
        headers = {"Accept": "application/json, text/plain"}
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


def _status_message(status: int, data: bytes) -> str:
    detail = ""
    try:
        problem = json.loads(data)
        if isinstance(problem, dict) and isinstance(problem.get("detail"), str):
            detail = f": {problem['detail'][:200]}"
    except (ValueError, UnicodeDecodeError):
        pass
    return f"HTTP {status} instead of 200{detail}"


def send_http(
    event: object,
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> bool:
    """POST one event to a sink's ``/events``; returns True only for an exact ACK."""
    clean = validate_event(event)
    target = check_target(url, "/events", allowed_hosts)
    status, answer = _post_json(target, event_json(clean).encode(), timeout)
    if not isinstance(answer, dict):
        raise NotAcknowledged("answer is not a JSON object", status=status)
    if answer.get("ack") is not True:
        raise NotAcknowledged(f"answer has ack={answer.get('ack')!r}, not true", status=status)
    if answer.get("id") != clean["id"]:
        raise NotAcknowledged(
            f"ACK names id {answer.get('id')!r}, not {clean['id']!r}", status=status
        )
    return True


@dataclass(frozen=True)
class BatchAnswer:
    #: How many leading events were acknowledged in order.
    acked: int
    #: The problem the sink reported for the first unacknowledged item, if any.
    error: dict[str, Any] | None


def post_batch(
    events: Sequence[object],
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> BatchAnswer:
    """POST 1-16 events to ``/events/batch`` and read which prefix was acknowledged."""
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise ValueError("events: must be a list of 1-16 events")
    if not 1 <= len(events) <= MAX_BATCH:
        raise ValueError(f"events: must hold 1-{MAX_BATCH} events, got {len(events)}")
    clean = [validate_event(item) for item in events]
    target = check_target(url, "/events/batch", allowed_hosts)
    body = "[" + ",".join(event_json(item) for item in clean) + "]"
    status, answer = _post_json(target, body.encode(), timeout)
    if not isinstance(answer, dict) or not isinstance(answer.get("acks"), list):
        raise NotAcknowledged("batch answer has no 'acks' list", status=status)
    acks: list[Any] = answer["acks"]
    if len(acks) > len(clean):
        raise NotAcknowledged("batch answer acknowledges more items than were sent")
    acked = 0
    for sent, ack in zip(clean, acks, strict=False):
        if not isinstance(ack, dict):
            raise NotAcknowledged(f"batch answer item {acked} is not an object", status=status)
        if ack.get("id") != sent["id"]:
            raise NotAcknowledged(
                f"batch answer item {acked} names id {ack.get('id')!r}, not {sent['id']!r}",
                status=status,
            )
        if ack.get("ack") is not True:
            break
        acked += 1
    error = answer.get("error")
    return BatchAnswer(acked, error if isinstance(error, dict) else None)


def send_http_batch(
    events: Sequence[object],
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> int:
    """POST up to 16 events; returns the length of the acknowledged prefix."""
    return post_batch(events, url, timeout=timeout, allowed_hosts=allowed_hosts).acked
