"""The rules of one answer's framing, shared by both parsers of ``read_answer``.

A parser (llhttp through ``httptools``, or ``http.client``) says what the bytes are; these
rules say what the relay accepts of them: the status must be final (nothing asks for an
interim answer), the body is framed by one ``Content-Length`` no larger than the 64 KiB cap,
by ``Transfer-Encoding: chunked`` alone, or by the end of the connection, and the connection
is kept only for HTTP/1.1 without ``Connection: close``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..errors import NotAcknowledged

MAX_ANSWER_BYTES = 64 * 1024
#: The answer's head (status line and headers) may be no longer than this.
MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 100
#: The header fields the rules read; a parser hands over only these (lower-case names).
#: ``Retry-After`` frames nothing: it is kept for the answer's judge (a 429's or 503's wait).
FRAMING_FIELDS = frozenset({b"content-length", b"transfer-encoding", b"connection", b"retry-after"})


class Receiver(Protocol):
    """What ``read_answer`` reads from: a socket, or one within a call's deadline."""

    def recv(self, size: int, /) -> bytes: ...


@dataclass(slots=True)  # not frozen: a frozen init costs a relay step more than it saves
class Framing:
    status: int
    #: The body's declared length, or None when it is chunked or runs to the close.
    length: int | None
    chunked: bool
    #: Whether the connection may carry another request after this answer.
    keep: bool
    #: The answer's ``Retry-After`` value as sent, if it had one.
    retry_after: bytes | None = None

    @property
    def until_close(self) -> bool:
        return self.length is None and not self.chunked


def malformed(what: str, status: int | None = None) -> NotAcknowledged:
    # The status, once read, still says whether the receiver refused (4xx: permanent).
    return NotAcknowledged(f"malformed HTTP answer: {what}", status=status)


def closed_early(anything_read: bool = True) -> ConnectionResetError:
    # An incomplete answer is the connection failing, whatever was read before.
    if not anything_read:
        return ConnectionResetError("the server closed the connection without an answer")
    return ConnectionResetError("the server closed the connection before a complete answer")


def over_cap(status: int) -> NotAcknowledged:
    return NotAcknowledged(
        f"answer body over {MAX_ANSWER_BYTES} bytes; not read further", status=status
    )


def longer_than_declared(status: int) -> NotAcknowledged:
    # Bytes after the answer would be taken as the next request's answer.
    return NotAcknowledged("answer body longer than declared", status=status)


def framing(status: int, http11: bool, fields: Iterable[tuple[bytes, bytes]]) -> Framing:
    """Judge a parsed head: ``fields`` are its (lower-case name, value) of FRAMING_FIELDS."""
    keep = http11  # an HTTP/1.0 answer ends its connection
    length: bytes | None = None
    coding: bytes | None = None
    wait: bytes | None = None
    for name, raw in fields:
        value = raw.strip(b" \t")
        if name == b"retry-after":
            wait = value
        elif name == b"content-length":
            if length is not None and value != length:
                raise malformed("conflicting Content-Length headers")
            length = value
        elif name == b"transfer-encoding":
            if coding is not None:
                raise malformed("several Transfer-Encoding headers")
            coding = value.lower()
        elif any(token.strip(b" \t") == b"close" for token in value.lower().split(b",")):
            keep = False
    if status < 200:
        # Nothing is sent that asks for an interim answer (no Expect: 100-continue).
        raise NotAcknowledged(f"HTTP {status} interim answer instead of 200", status=status)
    rules = _framed(status, keep, length, coding)
    rules.retry_after = wait
    return rules


def _framed(status: int, keep: bool, length: bytes | None, coding: bytes | None) -> Framing:
    if coding is not None:
        if coding != b"chunked":
            raise malformed(f"unsupported Transfer-Encoding {coding[:40]!r}")
        if length is not None:
            # Both framings at once is how requests are smuggled; no honest server sends it.
            raise malformed("both Content-Length and Transfer-Encoding")
        return Framing(status, None, True, keep)
    if status in (204, 304):
        return Framing(status, 0, False, keep)
    if length is None:
        return Framing(status, None, False, False)
    if not length.isdigit() or len(length) > 12 or int(length) > MAX_ANSWER_BYTES:
        raise NotAcknowledged(
            f"answer body too large or malformed length ({length[:40].decode('latin-1')!r} "
            f"bytes, cap {MAX_ANSWER_BYTES})",
            status=status,
        )
    return Framing(status, int(length), False, keep)
