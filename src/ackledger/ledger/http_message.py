"""One HTTP/1.1 exchange with the ledger as bytes, without any I/O (sans-IO).

``request_bytes`` writes a request whole; ``AnswerReader`` is fed the bytes of its answer as
they arrive, says when the answer is complete, and hands over ``(status, body)``. The
synchronous and the asyncio transports of ``transport`` only move these bytes, so both
speak exactly the same HTTP and judge answers by the same rules: a final status, a body
framed by one ``Content-Length``, by ``chunked`` alone or by the end of the connection, read
up to a cap and never past it. Each request asks for ``Connection: close``: a worker asks once.
"""

from __future__ import annotations

import re

from ..errors import NotAcknowledged
from ..wire.framing import MAX_HEAD_BYTES, closed_early, malformed
from ..wire.targets import Target
from ..wire.token import Token, as_token

_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\x00-\x08\x0a-\x1f\x7f]*)?")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})(?:;[^\r\n]*)?")
#: What a chunked body may spend on chunk sizes beside its data, past the body's own cap.
_CHUNK_ROOM = 64 * 1024


def request_bytes(
    target: Target, method: str, path: str, body: bytes | None, token: Token | str | None
) -> bytes:
    """The whole request: head and body in one piece, to be written at once."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}:{target.port}",
        "Accept: application/json, text/plain",
        "Connection: close",
    ]
    bearer = as_token(token)
    if bearer is not None:
        lines.append("Authorization: " + bearer.header().decode("ascii"))
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")


def _over_cap(cap: int, status: int) -> NotAcknowledged:
    return NotAcknowledged(f"answer body over {cap} bytes; not read further", status=status)


class AnswerReader:
    """The answer to one request, fed as it arrives: ``feed`` returns True once it is
    complete (more bytes would be an error); ``answer()`` then, or at the end of the
    connection, returns ``(status, body)`` or raises what is wrong with it."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._buf = bytearray()
        self._head_end = -1
        self._status = 0
        #: The whole answer's length, once a Content-Length says it.
        self._total: int | None = None
        self._chunked = False

    def feed(self, data: bytes) -> bool:
        self._buf += data
        if self._head_end < 0:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise malformed(f"head over {MAX_HEAD_BYTES} bytes")
                return False
            self._head_end = end + 4
            self._judge_head(bytes(self._buf[:end]))
        body_len = len(self._buf) - self._head_end
        if self._total is not None:
            if len(self._buf) > self._total:
                raise malformed("answer body longer than declared", self._status)
            return len(self._buf) == self._total
        if body_len > self._cap + (_CHUNK_ROOM if self._chunked else 0):
            raise _over_cap(self._cap, self._status)
        # A chunked body ends in its last chunk; its end is checked by decoding it.
        return self._chunked and self._buf.endswith(b"0\r\n\r\n") and self._chunks() is not None

    def answer(self) -> tuple[int, bytes]:
        """The status and body of a complete answer (ConnectionResetError if it was cut)."""
        if self._head_end < 0:
            raise closed_early(bool(self._buf))
        if self._total is not None:
            if len(self._buf) < self._total:
                raise closed_early()
            return self._status, bytes(self._buf[self._head_end :])
        if self._chunked:
            body = self._chunks()
            if body is None:
                raise closed_early()
            return self._status, body
        return self._status, bytes(self._buf[self._head_end :])

    def _judge_head(self, head: bytes) -> None:
        status_line, *fields = head.split(b"\r\n")
        found = _STATUS_LINE.fullmatch(status_line)
        if found is None:
            raise malformed(f"status line {status_line[:40]!r}")
        status = self._status = int(found.group(1))
        length: bytes | None = None
        coding: bytes | None = None
        for line in fields:
            name, colon, value = line.partition(b":")
            if not colon or _TOKEN.fullmatch(name) is None:
                raise malformed(f"header line {line[:40]!r}", status)
            value = value.strip(b" \t")
            lowered = name.lower()
            if lowered == b"content-length":
                if length is not None and value != length:
                    raise malformed("conflicting Content-Length headers", status)
                length = value
            elif lowered == b"transfer-encoding":
                if coding is not None:
                    raise malformed("several Transfer-Encoding headers", status)
                coding = value.lower()
        if status < 200:
            raise NotAcknowledged(f"HTTP {status} interim answer", status=status)
        if coding is not None:
            if coding != b"chunked":
                raise malformed(f"unsupported Transfer-Encoding {coding[:40]!r}", status)
            if length is not None:
                raise malformed("both Content-Length and Transfer-Encoding", status)
            self._chunked = True
        elif status in (204, 304):
            self._total = self._head_end
        elif length is not None:
            if not length.isdigit() or len(length) > 12:
                raise malformed(f"Content-Length {length[:40]!r}", status)
            if int(length) > self._cap:
                raise _over_cap(self._cap, status)
            self._total = self._head_end + int(length)

    def _chunks(self) -> bytes | None:
        """The chunked body decoded; None while its last chunk has not arrived."""
        data = bytes(self._buf[self._head_end :])
        body = bytearray()
        at = 0
        while True:
            line_end = data.find(b"\r\n", at)
            if line_end < 0:
                return None
            size = _CHUNK_SIZE.fullmatch(data[at:line_end])
            if size is None:
                raise malformed(f"chunk size {data[at:line_end][:20]!r}", self._status)
            n = int(size.group(1), 16)
            at = line_end + 2
            if n == 0:
                # Trailers, if any, are not read; the body ends here.
                return bytes(body) if data.endswith(b"\r\n\r\n") else None
            if len(data) < at + n + 2:
                return None
            if data[at + n : at + n + 2] != b"\r\n":
                raise malformed("chunk not followed by CRLF", self._status)
            body += data[at : at + n]
            if len(body) > self._cap:
                raise _over_cap(self._cap, self._status)
            at += n + 2
