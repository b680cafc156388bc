"""Sending events over HTTP to a sink, safely.

Only allow-listed loopback ``/events`` URLs are accepted, checked before any connection or
name look-up. The POSTs of the hot path go through a small HTTP/1.1 client of our own rather
than ``http.client``, whose header parsing (``email.feedparser``) and several reads cost more
per event than the rest of a relay step around it. It is kept deliberately narrow:

- it never reads proxy variables and never follows redirects: any status but 200 is a
  refusal carrying that status;
- a request is one write of head and body; the answer's status line and headers are parsed
  strictly (HTTP/1.0 or 1.1, token names, no folding, no control characters), and anything
  else is refused as a "malformed HTTP answer";
- the body is read to its ``Content-Length`` (a declared length over the 64 KiB cap is
  refused before reading), as ``Transfer-Encoding: chunked`` (the same cap, counted as the
  chunks announce themselves), or up to the end of the connection, never past the cap; any
  other transfer coding, or both framings at once, is refused; bytes after the answer are
  refused too (they would be taken for the next answer);
- connection failures, time-outs (of the connect and of each read) and a connection closed
  before the answer is complete raise ``OSError``.

Connections are kept alive per thread and host unless the answer says ``Connection: close``
(or is HTTP/1.0); any error discards the connection. A kept connection that the server has
closed is noticed *before* sending, never retried after: a send either happened once on this
call or raised. ``request_once`` (operator tools, one request each) stays on ``http.client``.
"""

from __future__ import annotations

import functools
import http.client
import re
import select
import socket
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import NotAcknowledged
from ..event import event_json, validate_event
from .ack import BatchAnswer, acked_prefix, answer_json, exact_ack
from .targets import Target, check_target, check_timeout

MAX_ANSWER_BYTES = 64 * 1024
MAX_BATCH = 16

_local = threading.local()

#: A status line: HTTP/1.0 or 1.1, three digits, then an optional reason of visible text.
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: [^\x00-\x08\x0a-\x1f\x7f]*)?")
#: A header line: a token, a colon right after it (RFC 9112 forbids space before it), a value
#: without control characters. Folded continuation lines do not match and are refused.
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):([^\x00-\x08\x0a-\x1f\x7f]*)")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})[ \t]*(?:;[^\x00-\x08\x0a-\x1f\x7f]*)?")
#: The answer's head (status line and headers) may be no longer than this.
MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 100


class _Connection:
    """One kept-alive connection to a sink, Nagle's algorithm off (a request is one write, but
    an ACK must not wait for a delayed ACK of the previous one either way)."""

    __slots__ = ("sock", "timeout")

    def __init__(self, target: Target, timeout: float) -> None:
        self.sock = socket.create_connection((target.host, target.port), timeout=timeout)
        self.timeout = timeout
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()


def _pool() -> dict[tuple[str, int], _Connection]:
    pool: dict[tuple[str, int], _Connection] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = {}
        _local.pool = pool
    return pool


def _is_dropped(conn: _Connection) -> bool:
    # A kept-alive socket that is readable before we sent anything holds either EOF or junk:
    # either way it is not fit to carry a request.
    readable, _, _ = select.select([conn.sock], [], [], 0)
    return bool(readable)


def _connection(target: Target, timeout: float) -> _Connection:
    key = (target.host, target.port)
    pool = _pool()
    conn = pool.get(key)
    if conn is not None and _is_dropped(conn):
        del pool[key]
        conn.close()
        conn = None
    if conn is None:
        # Applies to connect, and to each send and read after it.
        conn = _Connection(target, timeout)
        pool[key] = conn
    elif conn.timeout != timeout:
        # settimeout is a system call; a relay keeps one timeout, so it is made once.
        conn.timeout = timeout
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


@functools.lru_cache(maxsize=256)
def _request_head(target: Target) -> bytes:
    """Everything of a POST's head up to the value of Content-Length (fixed per target)."""
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
        b"Content-Type: application/json\r\n"
        b"Accept: application/json\r\n"
        b"Content-Length: "
    )


def _malformed(what: str) -> NotAcknowledged:
    return NotAcknowledged(f"malformed HTTP answer: {what}")


def _closed_early() -> ConnectionResetError:
    # The answer is incomplete: that is the connection failing, whatever was read before.
    return ConnectionResetError("the server closed the connection before a complete answer")


class _Answer:
    """Reads one answer from a socket: status line and headers parsed here, the body read to
    its declared end and no further than the cap, nothing read beyond the answer unnoticed."""

    __slots__ = ("buf", "pos", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.pos = 0

    def _more(self, limit: int) -> bool:
        """Append at most ``limit`` bytes from one read; False at end of stream."""
        chunk = self.sock.recv(limit)
        if not chunk:
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def _through(self, mark: bytes, limit: int, what: str) -> bytes:
        """The bytes before the next ``mark`` (which is consumed too), at most ``limit``."""
        while True:
            end = self.buf.find(mark, self.pos)
            if end >= 0:
                found = self.buf[self.pos : end]
                self.pos = end + len(mark)
                return found
            if len(self.buf) - self.pos >= limit:
                raise _malformed(f"{what} over {limit} bytes")
            if not self._more(limit):
                if self.buf:
                    raise _closed_early()
                raise ConnectionResetError("the server closed the connection without an answer")

    def head(self) -> bytes:
        return self._through(b"\r\n\r\n", MAX_HEAD_BYTES, "head")

    def exactly(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            # Ask for no more than is missing: nothing past the answer is read.
            if not self._more(n - (len(self.buf) - self.pos)):
                raise _closed_early()
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    def line(self) -> bytes:
        """One CRLF-ended line of a chunked body: a chunk size or a trailer field."""
        return self._through(b"\r\n", 1024, "chunk size or trailer line")

    def until_close(self, status: int) -> bytes:
        """A body delimited by the end of the connection, refused once over the cap."""
        while len(self.buf) - self.pos <= MAX_ANSWER_BYTES:
            if not self._more(MAX_ANSWER_BYTES + 1 - (len(self.buf) - self.pos)):
                return self.buf[self.pos :]
        raise NotAcknowledged(
            f"answer body over {MAX_ANSWER_BYTES} bytes; not read further", status=status
        )

    def chunked(self, status: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = self.line()
            match = _CHUNK_SIZE.fullmatch(size_line)
            if match is None:
                raise _malformed(f"chunk size line {size_line[:40]!r}")
            size = int(match.group(1), 16)
            if size == 0:
                break
            total += size
            if total > MAX_ANSWER_BYTES:
                raise NotAcknowledged(
                    f"answer body over {MAX_ANSWER_BYTES} bytes; not read further", status=status
                )
            parts.append(self.exactly(size))
            if self.exactly(2) != b"\r\n":
                raise _malformed("chunk not followed by CRLF")
        trailers = 0
        while self.line():
            trailers += 1  # trailer fields are read past, never used
            if trailers > MAX_HEADERS:
                raise _malformed(f"over {MAX_HEADERS} trailer lines")
        return b"".join(parts)

    def leftover(self) -> bool:
        return self.pos < len(self.buf)


def _read_answer(sock: socket.socket) -> tuple[int, bytes, bool]:
    """Read one answer: (status, body, whether the connection may carry another request)."""
    answer = _Answer(sock)
    lines = answer.head().split(b"\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        raise _malformed(f"status line {lines[0][:40]!r}")
    status = int(status_line.group(2))
    if len(lines) > MAX_HEADERS + 1:
        raise _malformed(f"over {MAX_HEADERS} header lines")
    keep = status_line.group(1) == b"1"  # an HTTP/1.0 answer ends its connection
    length: bytes | None = None
    coding: bytes | None = None
    for index in range(1, len(lines)):
        field = _HEADER_LINE.fullmatch(lines[index])
        if field is None:
            raise _malformed(f"header line {lines[index][:40]!r}")
        name = field.group(1).lower()
        if name == b"content-length":
            value = field.group(2).strip(b" \t")
            if length is not None and value != length:
                raise _malformed("conflicting Content-Length headers")
            length = value
        elif name == b"transfer-encoding":
            if coding is not None:
                raise _malformed("several Transfer-Encoding headers")
            coding = field.group(2).strip(b" \t").lower()
        elif name == b"connection":
            tokens = field.group(2).lower().split(b",")
            if any(token.strip(b" \t") == b"close" for token in tokens):
                keep = False
    if status < 200:
        # Nothing is sent that asks for an interim answer (no Expect: 100-continue).
        raise NotAcknowledged(f"HTTP {status} interim answer instead of 200", status=status)
    if coding is not None:
        if coding != b"chunked":
            raise _malformed(f"unsupported Transfer-Encoding {coding[:40]!r}")
        if length is not None:
            # Both framings at once is how requests are smuggled; no honest server sends it.
            raise _malformed("both Content-Length and Transfer-Encoding")
        body = answer.chunked(status)
    elif status in (204, 304):
        body = b""
    elif length is not None:
        if not length.isdigit() or len(length) > 12 or int(length) > MAX_ANSWER_BYTES:
            raise NotAcknowledged(
                f"answer body too large or malformed length ({length[:40].decode('latin-1')!r} "
                f"bytes, cap {MAX_ANSWER_BYTES})",
                status=status,
            )
        body = answer.exactly(int(length))
    else:
        body = answer.until_close(status)
        keep = False
    if answer.leftover():
        # Bytes after the answer would be taken as the next request's answer.
        raise NotAcknowledged("answer body longer than declared", status=status)
    return status, body, keep


def _post_json(target: Target, body: bytes, timeout: float) -> tuple[int, Any]:
    """POST and return (status, parsed JSON); raises NotAcknowledged for unusable answers."""
    conn = _connection(target, check_timeout(timeout))
    try:
        # One write: head and body together, so neither waits for the other's ACK.
        conn.sock.sendall(_request_head(target) + b"%d\r\n\r\n" % len(body) + body)
        status, data, keep = _read_answer(conn.sock)
    except BaseException:
        # Whatever went wrong, the connection's state is unknown: never reuse it. Connection
        # failures and time-outs propagate as the OSErrors they are.
        _discard(target)
        raise
    if not keep:
        _discard(target)
    return status, answer_json(status, data)


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
) -> tuple[int, bytes]:
    """One request on its own connection (workers and operator tools ask once): returns
    (status, body), the body read up to ``cap``; connection errors raise as OSError."""
    conn = _OnceConnection(target.host, target.port, timeout=check_timeout(timeout))
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
    return exact_ack(status, answer, clean["id"])


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
    return acked_prefix(status, answer, clean)


def send_http_batch(
    events: Sequence[object],
    url: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> int:
    """POST up to 16 events; returns the length of the acknowledged prefix."""
    return post_batch(events, url, timeout=timeout, allowed_hosts=allowed_hosts).acked
