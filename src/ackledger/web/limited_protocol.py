"""The HTTP protocol of both services with the limits of ``web.limits`` enforced.

uvicorn's httptools protocol has no cap on a request's head and no time-out on reading one:
it gathers a header of any size (joining its pieces
costs time that grows faster than its length: 128 MiB took 25 s of CPU and stalled every other
request), and a connection that sends a head or a body a byte at a time is never closed (its
keep-alive timer is armed only after an answer). ``LimitedHttpTools`` adds both on the
protocol's own callbacks:

- the bytes received while a head is incomplete are counted; past ``head_bytes`` the request
  gets 431 and the connection is closed: the parser never sees more than one read past it;
- a head must be complete ``read_timeout`` seconds after its first byte (or after the
  connection opened), and a body ``read_timeout`` seconds after its head; else the connection
  is closed (a request already being answered is left to finish).
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


class LimitedHttpTools(HttpToolsProtocol):
    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        #: A head is being received (or awaited on a fresh connection).
        self._in_head = True
        self._head_bytes = 0
        self._heads_done = 0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head and self._timer is None:
            self._arm()  # the first bytes of a kept-alive connection's next request
        heads_before = self._heads_done
        super().data_received(data)
        if self._in_head and self._heads_done == heads_before:
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.head_bytes and not self.transport.is_closing():
                self._disarm()
                self.transport.write(_too_large_answer(self._limits.head_bytes))
                self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._heads_done += 1
        self._disarm()
        super().on_headers_complete()
        if not self.transport.is_closing() and self.cycle is not None and self.cycle.more_body:
            self._arm()  # the body's time-out

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        # The next head's clock starts with its first byte (idle time is keep-alive's).
        self._in_head = True

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self._limits.read_timeout, self._read_timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _read_timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._in_head and cycle is not None and not cycle.response_complete:
            # Bytes of a pipelined request arrived while this one is answered: let it finish.
            self._arm()
            return
        self.transport.close()
