"""Reading one answer with llhttp (``httptools``, in the ``server`` extra).

llhttp is strict by itself: token names, no folding, no control characters, CRLF line ends,
one Content-Length, no Content-Length beside chunked, CRLF after each chunk. The rules of
``framing`` are applied when the head is complete, before any of the body is taken; reads
are sized so that nothing past a declared length, and little past the cap, is ever read.
"""

from __future__ import annotations

from typing import NoReturn

import httptools

from ..errors import NotAcknowledged
from .framing import (
    FRAMING_FIELDS,
    MAX_ANSWER_BYTES,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    Framing,
    Receiver,
    closed_early,
    framing,
    longer_than_declared,
    malformed,
    over_cap,
)


class _Answer:
    """The parser's callbacks for one answer: the framing fields, then the body."""

    __slots__ = (
        "body",
        "complete",
        "fields",
        "framing",
        "headers",
        "parser",
        "problem",
        "read",
        "size",
    )

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        # Spaces after a chunk's size were always taken (RFC 9112's BWS); llhttp refuses them.
        self.parser.set_dangerous_leniencies(lenient_spaces_after_chunk_size=True)
        self.reset()

    def reset(self) -> None:
        """Ready for the next answer on the same connection. The parser goes on as llhttp
        does on a kept-alive connection (a new message after a complete one); after any error
        the connection, and this with it, is discarded, so a parser in an error state is
        never fed again."""
        self.fields: list[tuple[bytes, bytes]] = []
        self.headers = 0
        self.framing: Framing | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False
        self.read = 0
        #: What a callback refused; llhttp only reports that a callback failed.
        self.problem: Exception | None = None

    def _refuse(self, problem: Exception) -> NoReturn:
        self.problem = problem
        raise problem

    @property
    def status(self) -> int:
        return self.framing.status if self.framing is not None else 0

    def on_message_begin(self) -> None:
        if self.complete:
            self._refuse(longer_than_declared(self.status))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers += 1
        if self.headers > MAX_HEADERS:
            self._refuse(malformed(f"over {MAX_HEADERS} header lines"))
        lowered = name.lower()
        if lowered in FRAMING_FIELDS:
            self.fields.append((lowered, value))

    def on_headers_complete(self) -> None:
        version = self.parser.get_http_version()
        if version not in ("1.0", "1.1"):
            self._refuse(malformed(f"HTTP version {version[:10]!r}"))
        try:
            self.framing = framing(self.parser.get_status_code(), version == "1.1", self.fields)
        except NotAcknowledged as exc:
            self._refuse(exc)

    def on_body(self, data: bytes) -> None:
        self.body.append(data)
        self.size += len(data)
        if self.size > MAX_ANSWER_BYTES:
            self._refuse(over_cap(self.status))

    def on_message_complete(self) -> None:
        self.complete = True

    def feed(self, data: bytes) -> None:
        self.read += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.problem is not None:
                raise self.problem from None
            if self.complete:  # llhttp refuses what follows a closing answer
                raise longer_than_declared(self.status) from None
            # llhttp has read the status line by the time a header is refused.
            raise malformed(str(exc)[:80], self.parser.get_status_code() or None) from None

    def wanted(self) -> int:
        """How many bytes the next read may ask for."""
        rules = self.framing
        if rules is None:
            if self.read >= MAX_HEAD_BYTES:
                raise malformed(f"head over {MAX_HEAD_BYTES} bytes")
            return MAX_HEAD_BYTES - self.read
        if rules.length is not None:
            return rules.length - self.size  # nothing past the answer
        room = MAX_ANSWER_BYTES + 1 - self.size
        # A chunked body's sizes and line ends come on top of its data.
        return room if rules.until_close else max(room, 1024)


def kept_answer() -> object:
    """What a kept connection reads its answers with (``read_answer``'s ``kept``)."""
    return _Answer()


def read_answer(sock: Receiver, kept: object = None) -> tuple[int, bytes, bool, bytes | None]:
    """Read one answer: (status, body, whether the connection may carry another request, its
    ``Retry-After`` value if any).
    ``kept`` is the connection's own reader from ``kept_answer`` (else one for this answer)."""
    if isinstance(kept, _Answer):
        answer = kept
        answer.reset()
    else:
        answer = _Answer()
    while not answer.complete:
        data = sock.recv(answer.wanted())
        if not data:
            if answer.framing is not None and answer.framing.until_close:
                break
            raise closed_early(answer.read > 0)
        answer.feed(data)
    assert answer.framing is not None  # a complete answer has had its head judged
    rules = answer.framing
    return rules.status, b"".join(answer.body), rules.keep, rules.retry_after
