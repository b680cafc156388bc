"""uvicorn's httptools protocol with the limits of ``web.limits`` enforced.

uvicorn's httptools protocol has no cap on a request's head and no time-out on reading one:
it gathers a header of any size (joining its pieces costs time that grows faster than its
length: 128 MiB took 25 s of CPU and stalled every other request), and a connection that
sends a head or a body a byte at a time is never closed (its keep-alive timer is armed only
after an answer). ``LimitedHttpTools`` adds both, and nothing else: every request still goes
through uvicorn's own request cycle, which answers it, keeps pipelined answers in order,
keeps idle connections alive for ``timeout_keep_alive`` and answers 503 past
``limit_concurrency`` (both set from ``Limits`` by ``web.server``).

- The head cap: past ``head_bytes`` the request gets 431 and the connection is closed; the
  request never reaches the app. A head is measured two ways, each never more than its true
  size: the URL and header lines the parser reported (a head that arrived in one read, however
  large, is judged before it is dispatched), and the reads that ended with it incomplete (a
  header the parser is still gathering, one read past the cap at most).
- The read time-outs: a head must be complete ``read_timeout`` seconds after its first byte
  (or after the connection opened), and a body ``read_timeout`` seconds after its head; else
  the connection is closed. A client is not late while an answer ahead of it is being made or
  while reading is paused (uvicorn pauses a pipelined request's connection).

Each connection holds one deadline and at most one timer, which on firing closes the
connection if the deadline has passed and otherwise re-arms itself, for the deadline or one
``_tick`` (the shorter time-out), whichever comes first: per request this costs a few
attribute writes, not a timer.

It subclasses uvicorn's protocol and uses only what is stable there: its constructor (passed
through), the ``asyncio.Protocol`` methods, the httptools parser callbacks (``on_url``,
``on_header``, ...; their names are httptools' contract), each of which calls uvicorn's own,
``on_response_complete``, the hook uvicorn's protocols call when an answer is done, and
``send_400_response``, its answer to bytes the parser refuses. It reads none of uvicorn's
attributes. Checked against the uvicorn versions pyproject admits.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .limits import Limits

_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/problem+json\r\n"
    b"connection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)


def _too_large_answer(cap: int) -> bytes:
    body = (
        b'{"type":"https://ackledger.invalid/problems/head-too-large",'
        b'"title":"Request head too large","status":431,'
        b'"detail":"the request head is over %d bytes"}' % cap
    )
    return _TOO_LARGE % (len(body), body)


#: The parser callbacks below end in uvicorn's own, called on its class: a ``super()`` object
#: per call was a measurable share of a request (each request makes about ten of them).
_UVICORN = HttpToolsProtocol


class LimitedHttpTools(HttpToolsProtocol):
    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._cap = limits.head_bytes
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: A head has begun (its first byte parsed) and is not complete yet.
        self._in_head = False
        #: The bytes of the head's URL and header lines, as the parser reported them.
        self._head_parsed = 0
        #: The bytes of the reads that ended with the head still incomplete.
        self._head_read = 0
        #: Heads and messages completed on this connection (a read that completes one
        #: holds more than the head being read).
        self._steps = 0
        #: A body is being read (its head is complete, its end not yet).
        self._in_body = False
        #: Requests dispatched and not answered yet.
        self._unanswered = 0
        #: The head was refused (431): whatever the parser reports after it is ignored.
        self._refused = False
        #: The loop time by which the head or body being read must be complete, or by which
        #: an idle connection must begin its next request; None: neither is awaited.
        self._deadline: float | None = None
        #: The deadline is an idle one (keep-alive's), not a read's.
        self._idle = False
        #: The longest the timer waits at once: never past a read deadline set meanwhile.
        self._tick = min(limits.read_timeout, limits.keep_alive)
        #: The connection's one timer, checking ``_deadline`` (None: not armed).
        self._timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        self._set_deadline(self._limits.read_timeout)  # the first head's clock

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        steps = self._steps
        _UVICORN.data_received(self, data)
        if self._in_head and self._steps == steps and not self._refused:
            # A head is under way and nothing completed in this read: every byte of it is
            # that head's (a read that also completed a head or a message is left to the
            # parser's count).
            self._head_read += len(data)
            if self._head_read > self._cap:
                self._refuse()

    # The parser's callbacks (httptools)

    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._in_head = True
        self._head_parsed = self._head_read = 0
        if self._deadline is None or self._idle:
            self._set_deadline(self._limits.read_timeout)  # the head's clock
        _UVICORN.on_message_begin(self)

    def on_url(self, url: bytes) -> None:
        self._head_parsed += len(url)
        if self._head_parsed > self._cap or self._refused:
            self._refuse()
            return
        _UVICORN.on_url(self, url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_parsed += len(name) + len(value) + 4  # ": " and CRLF
        if self._head_parsed > self._cap or self._refused:
            self._refuse()
            return
        _UVICORN.on_header(self, name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        self._in_body = True
        self._steps += 1
        self._unanswered += 1
        self._set_deadline(self._limits.read_timeout)  # the body's clock
        _UVICORN.on_headers_complete(self)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            _UVICORN.on_body(self, body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_body = False
        self._steps += 1
        self._deadline = None
        _UVICORN.on_message_complete(self)
        if not self._unanswered and not self._closing():
            # Answered before its body was all in (a refusal): uvicorn's keep-alive timer,
            # armed with the answer, was stopped by the body's bytes; idle from here.
            self._set_deadline(self._limits.keep_alive)
            self._idle = True

    # uvicorn's hooks

    def send_400_response(self, msg: str) -> None:
        # The parser refused bytes behind a refused head (they came in the same read): the
        # 431 is the connection's last answer, sent in its turn.
        if not self._refused:
            super().send_400_response(msg)

    def on_response_complete(self) -> None:
        self._unanswered -= 1
        _UVICORN.on_response_complete(self)  # resumes reading; starts a pipelined request
        if self._refused:
            if not self._unanswered:
                self._send_refusal()  # the refused head's turn
            return
        if self._deadline is not None and not self._idle and not self._closing():
            self._set_deadline(self._limits.read_timeout)  # the read's clock from reading on

    # The limits

    def _closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def _refuse(self) -> None:
        """431 for the head being read, and the connection closed: at once, or once the
        answers ahead of it are out (reading stops meanwhile)."""
        if self._refused:
            return
        self._refused = True
        self._deadline = None
        if self._unanswered:
            if self._transport is not None and not self._transport.is_closing():
                self._transport.pause_reading()
        else:
            self._send_refusal()

    def _send_refusal(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(_too_large_answer(self._cap))
            transport.close()

    def _set_deadline(self, seconds: float) -> None:
        assert self._loop is not None, "a deadline is set only on a connection"
        self._idle = False
        self._deadline = self._loop.time() + seconds
        if self._timer is None:
            self._timer = self._loop.call_later(min(seconds, self._tick), self._check)

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None or self._closing() or self._loop is None:
            return  # nothing is being read: the next read arms the timer again
        now = self._loop.time()
        if now < deadline:
            self._timer = self._loop.call_later(min(deadline - now, self._tick), self._check)
            return
        transport = self._transport
        assert transport is not None
        if not self._idle:
            ahead = self._unanswered - (1 if self._in_body else 0)
            if ahead > 0 or not transport.is_reading():
                # An answer ahead of this read is being made, or reading is paused: the
                # client is not late; its clock restarts.
                self._set_deadline(self._limits.read_timeout)
                return
        transport.close()
