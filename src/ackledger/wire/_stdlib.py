"""Reading one answer with ``http.client``, for when ``httptools`` is not installed.

``http.client`` parses; what it would let through that llhttp refuses is checked around it:
the status line is HTTP/1.0 or 1.1 with three digits (``http.client`` skips a 100 Continue
and takes HTTP/1.x for any x), every line ends in CRLF, names are tokens, values hold no
control characters (a folded line leaves its CRLF in the value), the email parser found no
defect (a line without a colon), and each chunk ends in CRLF. ``_Source`` is the socket as
``http.client`` reads it: nothing past what is asked, but to find a line's end; what it holds
after the answer was sent after it, and is refused.
"""

from __future__ import annotations

import http.client
import re
import socket
from typing import cast

from ..errors import NotAcknowledged
from .framing import (
    FRAMING_FIELDS,
    MAX_ANSWER_BYTES,
    MAX_HEAD_BYTES,
    Framing,
    Receiver,
    closed_early,
    framing,
    longer_than_declared,
    malformed,
    over_cap,
)

_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: [^\x00-\x08\x0a-\x1f\x7f]*)?\r\n")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: What a chunked body may spend on chunk sizes and trailers beside its data.
_FRAMING_ROOM = MAX_ANSWER_BYTES


class _Source:
    __slots__ = ("buf", "eof", "first", "limit", "sock", "status", "taken")

    def __init__(self, sock: Receiver) -> None:
        self.sock = sock
        self.buf = b""
        self.eof = False
        self.first = b""
        self.taken = 0
        #: The most bytes to hand out; the status is 0 while the head is read.
        self.limit = MAX_HEAD_BYTES
        self.status = 0

    def makefile(self, mode: str) -> _Source:
        return self

    def _fill(self, want: int) -> bool:
        data = self.sock.recv(want)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _take(self, n: int) -> bytes:
        if self.taken + n > self.limit:
            if self.status:
                raise over_cap(self.status)
            raise malformed(f"head over {MAX_HEAD_BYTES} bytes")
        data = self.buf[:n]
        self.buf = self.buf[n:]
        self.taken += len(data)
        return data

    def readline(self, limit: int = -1) -> bytes:
        room = self.limit - self.taken + 1  # one more than allowed, to notice it
        if limit >= 0:
            room = min(room, limit)
        end = self.buf.find(b"\n")
        while end < 0 and len(self.buf) < room and self._fill(MAX_HEAD_BYTES):
            end = self.buf.find(b"\n")
        line = self._take(end + 1 if 0 <= end < room else min(len(self.buf), room))
        if not self.first:
            self.first = line
        if not line.endswith(b"\r\n") and not self.eof:
            raise malformed(f"line not ended by CRLF {line[:40]!r}")
        return line

    def read(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill(n - len(self.buf)):
            pass  # ask for no more than is missing: nothing past the answer is read
        return self._take(n)

    def close(self) -> None:
        pass  # the connection is the pool's, kept or dropped after the answer


class _Response(http.client.HTTPResponse):
    def _safe_read(self, amt: int) -> bytes:
        # http.client's only reads of a chunked body's data and line ends, hooked for two
        # checks it skips: a negative size, and the CRLF it tosses after each chunk.
        if amt < 0:
            raise malformed("negative chunk size")
        line_end = self.chunked and self.chunk_left == 0
        data: bytes = http.client.HTTPResponse._safe_read(self, amt)  # type: ignore[attr-defined]
        if line_end and data != b"\r\n":
            raise malformed("chunk not followed by CRLF")
        return data


def _judge(response: _Response, source: _Source) -> Framing:
    status_line = _STATUS_LINE.fullmatch(source.first)
    if status_line is None:
        raise malformed(f"status line {source.first[:40]!r}")
    if response.msg.defects:
        raise malformed(f"head: {response.msg.defects[0]!r}"[:80])
    fields: list[tuple[bytes, bytes]] = []
    for name, value in response.msg.raw_items():
        if _TOKEN.fullmatch(name) is None or _CONTROL.search(value) is not None:
            raise malformed(f"header line {name[:20]!r}: {value[:20]!r}")
        lowered = name.lower().encode("latin-1")
        if lowered in FRAMING_FIELDS:
            fields.append((lowered, value.encode("latin-1")))
    # The first status line's code: http.client would have skipped a 100 Continue.
    rules = framing(int(status_line.group(2)), status_line.group(1) == b"1", fields)
    # The rules frame the body, not http.client's own reading (it takes "chunked " unchunked).
    response.chunked = rules.chunked
    response.chunk_left = None
    response.length = rules.length
    return rules


def kept_answer() -> object:
    """Nothing is kept between answers here: ``http.client`` reads each one afresh."""
    return None


def read_answer(sock: Receiver, kept: object = None) -> tuple[int, bytes, bool, bytes | None]:
    """Read one answer: (status, body, whether the connection may carry another request, its
    ``Retry-After`` value if any)."""
    source = _Source(sock)
    response = _Response(cast(socket.socket, source))  # it only asks for makefile()
    try:
        response.begin()
        if source.eof:  # the head ends in a blank line: a close before it cut the head
            raise closed_early()
        rules = _judge(response, source)
        source.status = rules.status
        source.limit = source.taken + MAX_ANSWER_BYTES + 1 + (_FRAMING_ROOM * rules.chunked)
        body = response.read(MAX_ANSWER_BYTES + 1)
    except NotAcknowledged:
        raise
    except (http.client.HTTPException, ValueError) as exc:
        if source.eof:
            raise closed_early(source.taken > 0) from None
        raise malformed(f"{type(exc).__name__}: {exc}"[:80]) from None
    if len(body) > MAX_ANSWER_BYTES:
        raise over_cap(rules.status)
    if (rules.length is not None and len(body) < rules.length) or (rules.chunked and source.eof):
        raise closed_early()
    if source.buf:
        raise longer_than_declared(rules.status)
    return rules.status, body, rules.keep, rules.retry_after
