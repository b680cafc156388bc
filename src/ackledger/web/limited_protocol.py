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

Per request this costs a few attribute writes, not timers: each connection holds one deadline
(the loop time by which the read in progress must be done, or by which an idle kept-alive
connection must have sent its next request; None: neither) and at most one timer, which on
firing closes the connection if the deadline has passed and otherwise re-arms itself, for the
deadline or one ``_tick`` (the shorter time-out), whichever comes first: so a read deadline set
while the timer waits for a later idle one is still kept. A busy kept-alive connection re-arms
it about once per ``_tick`` instead of creating and cancelling three timers per request (two
for the reads, bench/CHANGES.md item 19, and uvicorn's own keep-alive timer, item 31).

The connection's writes also go out together: uvicorn writes an answer's head and its body
with two ``transport.write`` calls, i.e. two ``send`` system calls and two TCP segments on a
``TCP_NODELAY`` socket. ``_Corked`` holds what is written during one turn of the event loop and
writes it as one piece when the answer is complete, or at the end of that turn at the latest:
one callback per turn of the loop (``_TurnEnd``) serves every connection that wrote in it.

A POST on the exact path of a direct route (``web.direct``: the sink's ``/events`` and
``/events/batch``) is answered here, without uvicorn's request cycle: ``_Direct`` gathers the
body, the route is called with the headers and the body, and its answer's bytes are written
in order with the connection's other answers (pipelined requests wait their turn in uvicorn's
own queue). A request with ``Expect``, a ``Transfer-Encoding``, an upgrade, a query or an
escaped path, or one over uvicorn's concurrency limit, takes uvicorn's cycle as before. Read
against uvicorn 0.55.0's ``httptools_impl``: besides the callbacks, this uses its ``url``,
``headers``, ``expect_100_continue``, ``scope``, ``cycle``, ``pipeline``, ``flow``,
``_start_asgi_task``, the cycle attributes its ``shutdown`` reads and its ``STATUS_LINE``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .answers import Answer
from .direct import DirectRoute, Pending, Served, served
from .limits import Limits

_LOG = logging.getLogger("ackledger.web")

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


#: The header names ``_begin_direct`` reads (llhttp takes Proxy-Connection for Connection).
_WATCHED = frozenset({b"transfer-encoding", b"content-length", b"connection", b"proxy-connection"})

#: uvicorn's answer to an app that raised before answering: its header lines and body.
_FAILED_HEAD = (
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n"
)
_FAILED_BODY = b"Internal Server Error"

#: The server's default header lines (date, server) joined, for the list they were made of:
#: uvicorn's server replaces that list when the date changes (once a second).
_DEFAULTS: list[Any] = [None, b""]


def _remember_defaults(default_headers: list[tuple[bytes, bytes]]) -> None:
    _DEFAULTS[1] = b"".join(b"%s: %s\r\n" % pair for pair in default_headers)
    _DEFAULTS[0] = default_headers  # held here: never another list at its address


class _Direct:
    """One request for a direct route: its body as it arrives, then its answer.

    It stands where uvicorn keeps its ``RequestResponseCycle`` (``protocol.cycle``, the
    pipeline's queue) and has the attributes read there: ``response_complete``,
    ``keep_alive`` (cleared by a graceful shutdown: the answer then closes the connection)
    and ``more_body``. It is also the listener of its route's ``Pending`` answer (called
    with it once its result is in), so no closure is made per request.
    """

    __slots__ = (
        "chunks",
        "dispatched",
        "headers",
        "keep_alive",
        "more_body",
        "over_cap",
        "protocol",
        "response_complete",
        "route",
        "started",
        "turn",
    )

    def __init__(
        self,
        protocol: LimitedHttpTools,
        route: Served,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        over_cap: bool,
    ) -> None:
        self.protocol = protocol
        self.route = route
        self.headers = headers
        self.keep_alive = keep_alive
        #: The declared body is over the route's cap: it is not gathered.
        self.over_cap = over_cap
        self.chunks: list[bytes] = []
        self.more_body = True
        self.response_complete = False
        #: No earlier answer of the connection is pending.
        self.turn = False
        self.dispatched = False
        self.started = time.perf_counter()

    def __call__(self, pending: Pending[Any]) -> None:
        """The route's result is in: its answer, timed, then written (the protocol's step
        here rather than a call to it: one frame fewer a request, bench/CHANGES.md item 111)."""
        protocol = self.protocol
        observe = self.route.observe
        try:
            answer = pending.finish(pending)
        except Exception as exc:
            if observe is not None:
                observe(500, self.started)
            protocol._failed(self, exc)
            return
        if observe is not None:
            observe(answer.status, self.started)
        lines, closing = answer.head_lines()
        protocol._write(self, answer.status, lines, closing, answer.body)


class _TurnEnd:
    """The corked connections of one event loop that wrote during this turn, flushed at its
    end by one callback: with many clients a turn answers many, and a callback per answer
    was one more handle for the loop to run per request."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._writers: list[_Corked] = []

    def add(self, corked: _Corked) -> None:
        if not self._writers:
            self._loop.call_soon(self._flush)
        self._writers.append(corked)

    def _flush(self) -> None:
        writers, self._writers = self._writers, []
        for corked in writers:
            corked.flush()  # nothing left for most: their answers completed and were sent


#: One per loop (tests run several), gone with its loop.
_TURN_ENDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _TurnEnd] = (
    weakref.WeakKeyDictionary()
)


def _turn_end(loop: asyncio.AbstractEventLoop) -> _TurnEnd:
    found = _TURN_ENDS.get(loop)
    if found is None:
        found = _TURN_ENDS[loop] = _TurnEnd(loop)
    return found


class _Corked:
    """A transport whose writes of one turn of the event loop are sent as one write.

    Everything the protocol and its request cycles write goes through here, in order; a
    ``close`` sends what is held first. Whatever else the protocol asks of its transport is
    the real one's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._turn_end = _turn_end(loop)
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            # The end of this turn at the latest, should the answer not complete in it.
            self._turn_end.add(self)
        self._held.append(data)

    def write_whole(self, data: bytes) -> None:
        """A whole answer, written now behind whatever is held (no end-of-turn callback)."""
        if self._held:
            self._held.append(data)
            self.flush()
        elif not self.transport.is_closing():
            self.transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held:
            self._held = []
            # Written after a close: dropped, as the connection is going (uvloop would raise).
            if not self.transport.is_closing():
                self.transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class LimitedHttpTools(HttpToolsProtocol):
    def __init__(
        self,
        *args: Any,
        limits: Limits,
        direct: Mapping[bytes, DirectRoute | Served] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        #: The direct routes by raw path (``web.direct``).
        self._direct = {path: served(route) for path, route in (direct or {}).items()}
        #: A direct request whose turn came while the transport's buffer was full.
        self._blocked: _Direct | None = None
        #: A head is being received (or awaited on a fresh connection).
        self._in_head = True
        self._head_bytes = 0
        self._heads_done = 0
        #: The loop time by which the head or body being read must be complete, or by which an
        #: idle connection must begin its next request; None: neither is awaited.
        self._deadline: float | None = None
        #: The deadline is keep-alive's (an answer was completed and nothing read since).
        self._idle = False
        #: The longest the timer waits at once: never past a read deadline set meanwhile.
        self._tick = min(limits.read_timeout, limits.keep_alive)
        #: The connection's one timer, checking ``_deadline`` (None: not armed).
        self._timer: asyncio.TimerHandle | None = None
        self._corked: _Corked | None = None
        #: The socket's own transport (``is_closing`` without ``_Corked``'s frame).
        self._real: asyncio.Transport = None  # type: ignore[assignment]
        #: A head completed in this ``data_received``: its body's clock is started at its end.
        self._body_clock = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._real = transport
        self._corked = _Corked(transport, self.loop)
        self.transport = self._corked  # type: ignore[assignment]
        self._start_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if isinstance(self.cycle, _Direct):
            # Mid-body: never dispatched, nothing applied; answered later: the answer is
            # dropped (the transport is closing). uvicorn's own has nothing to tell it.
            self.cycle = None  # type: ignore[assignment]
        self._blocked = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # The first bytes of a kept-alive connection's next request start its head's clock.
        # It is started after the parser has run, at the same loop time (nothing else runs
        # in between): when the whole head came in these bytes, its completion would clear
        # it at once, and the body's clock (or none, the body being in too) replaces it.
        in_head = self._in_head
        head_clock = in_head and (self._deadline is None or self._idle)
        heads_before = self._heads_done
        # uvicorn's own data_received, without its keep-alive timer (never armed here).
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        if self._heads_done != heads_before:
            if self._body_clock:
                self._body_clock = False
                cycle = self.cycle
                if cycle is not None and cycle.more_body and not self._closing():
                    self._start_read()  # the last head's body is still to come: its time-out
        elif in_head:
            # Only bytes that arrived while a head was being read: the read that ends a body
            # (a batch's may be far over the head's cap) is not the next head.
            if head_clock:
                self._start_read()
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.head_bytes and not self._closing():
                self._deadline = None
                self.transport.write(_too_large_answer(self._limits.head_bytes))
                self.transport.close()

    def _closing(self) -> bool:
        return self._real.is_closing()

    def on_message_begin(self) -> None:
        if not self._direct:
            super().on_message_begin()
            return
        # uvicorn's, but its ASGI scope is made only for a request that takes its cycle.
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = None  # type: ignore[assignment]

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._heads_done += 1
        self._deadline = None
        route = self._direct.get(self.url) if self._direct else None
        if route is None or not self._begin_direct(route):
            if self.scope is None:
                self._make_scope()
            super().on_headers_complete()
        # The body's time-out, started at the end of this data_received if the body is not
        # all in by then.
        self._body_clock = True

    def _make_scope(self) -> None:
        """uvicorn's scope for this request (its ``on_message_begin`` makes it), keeping the
        URL and headers read since."""
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()
        self.url, self.headers, self.expect_100_continue = url, headers, expect
        self.scope["headers"] = headers

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if isinstance(cycle, _Direct):
            if not cycle.over_cap and not cycle.response_complete:
                cycle.chunks.append(body)  # at most the cap: Content-Length was checked
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if isinstance(cycle, _Direct):
            cycle.more_body = False
        else:
            super().on_message_complete()
        self._deadline = None
        # The next head's clock starts with its first byte (idle time is keep-alive's).
        self._in_head = True
        if isinstance(cycle, _Direct) and cycle.turn and not cycle.dispatched:
            self._dispatch(cycle)
        if cycle is not None and cycle.response_complete and not self._closing():
            # Answered before its body was all in (a refusal): idle from here.
            self._set_deadline(self._limits.keep_alive)
            self._idle = True

    def on_response_complete(self) -> None:
        # The answer's last write was just made: send it now rather than at the turn's end
        # (a direct answer was written whole: nothing is held).
        corked = self._corked
        if corked is not None and corked._held:
            corked.flush()
        # uvicorn's own, but for its keep-alive timer, armed and cancelled per request there:
        # here the idle time is the connection's deadline, checked by its one timer.
        self.server_state.total_requests += 1
        if self._real.is_closing():
            return
        if self.flow.read_paused:
            self.flow.resume_reading()
        if self.pipeline:
            if self._deadline is not None:
                self._start_read()  # a read in progress: its clock from reading's resumption
            cycle, app = self.pipeline.pop()
            if isinstance(cycle, _Direct):
                # In a turn of its own, as uvicorn's task would: a long pipeline of
                # answers made at once never nests calls.
                self.loop.call_soon(self._take_turn, cycle)
            else:
                self._start_asgi_task(cycle, app)
        elif self._deadline is None:  # else the next head is being read, on its own clock
            self._set_deadline(self._limits.keep_alive)
            self._idle = True

    def resume_writing(self) -> None:
        super().resume_writing()
        blocked, self._blocked = self._blocked, None
        if blocked is not None:
            self._take_turn(blocked)

    # The direct routes (web.direct).

    def _begin_direct(self, route: Served) -> bool:
        """Take this request past uvicorn's cycle; False: it is one for that cycle."""
        parser = self.parser
        if parser.get_method() != b"POST" or self.expect_100_continue or parser.should_upgrade():
            return False
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            return False  # uvicorn's 503
        over_cap = asked = False
        for name, value in self.headers:
            if name in _WATCHED:
                if name == b"transfer-encoding":
                    return False  # a chunked body: read_body's own count of it
                if name == b"content-length":
                    over_cap = over_cap or (value.isdigit() and int(value) > route.cap)
                else:
                    asked = True
        # uvicorn keeps no HTTP/1.0 connection alive. llhttp keeps one alive only when it
        # asked to be (a Connection header), so the version, a string formatted per call
        # (~0.3 us), is read only then (bench/CHANGES.md item 111).
        keep_alive = parser.should_keep_alive() and not (
            asked and parser.get_http_version() == "1.0"
        )
        cycle = _Direct(self, route, self.headers, keep_alive, over_cap)
        existing = self.cycle
        self.cycle = cycle  # type: ignore[assignment]
        if existing is None or existing.response_complete:
            if self.flow.write_paused or self._real.is_closing():
                self._take_turn(cycle)
            else:
                # ``_take_turn``'s common case: its body is still to come (but over the cap).
                cycle.turn = True
                if over_cap:
                    self._dispatch(cycle)
        else:
            # Pipelined: answered after the answers before it, reading paused till then.
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, None))  # type: ignore[arg-type]
        return True

    def _take_turn(self, cycle: _Direct) -> None:
        if self._real.is_closing():
            return  # the client left before its turn: nothing is applied
        if self.flow.write_paused:
            self._blocked = cycle  # the client reads none of its answers: wait for it
            return
        cycle.turn = True
        if cycle.over_cap or not cycle.more_body:
            self._dispatch(cycle)

    def _dispatch(self, cycle: _Direct) -> None:
        """The route's steps (``web.direct.Served``): the check, the answer, its timing."""
        cycle.dispatched = True
        route = cycle.route
        try:
            refuse = route.refuse
            refusal = refuse(cycle.headers) if refuse is not None else None
        except Exception as exc:
            self._failed(cycle, exc)  # before the route: not timed, as a wrapper's failure
            return
        if refusal is not None:
            self._answer(cycle, refusal)
            return
        chunks = cycle.chunks
        body = None if cycle.over_cap else chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            outcome = route.answer(cycle.headers, body)
        except Exception as exc:
            self._observe(cycle, 500)
            self._failed(cycle, exc)
            return
        if isinstance(outcome, Pending):
            outcome.listen(cycle)  # cycle(outcome): its answer, timed and written
        else:
            self._observe(cycle, outcome.status)
            self._answer(cycle, outcome)

    def _observe(self, cycle: _Direct, status: int) -> None:
        observe = cycle.route.observe
        if observe is not None:
            observe(status, cycle.started)

    def _failed(self, cycle: _Direct, exc: Exception) -> None:
        _LOG.error("Exception in a direct route", exc_info=exc)
        self._write(cycle, 500, _FAILED_HEAD, True, _FAILED_BODY)

    def _answer(self, cycle: _Direct, answer: Answer) -> None:
        lines, closing = answer.head_lines()
        self._write(cycle, answer.status, lines, closing, answer.body)

    def _write(self, cycle: _Direct, status: int, lines: bytes, closing: bool, body: bytes) -> None:
        """The answer's bytes as uvicorn's cycle writes them: its default headers (date,
        server) first, then the answer's header ``lines``, ``connection: close`` unless kept
        alive (``closing``: the answer has it already)."""
        cycle.response_complete = True
        real = self._real
        if real.is_closing():
            return  # the client left: the answer is dropped
        ending = b"\r\n" if cycle.keep_alive or closing else b"connection: close\r\n\r\n"
        defaults = self.server_state.default_headers
        if _DEFAULTS[0] is not defaults:
            _remember_defaults(defaults)
        # uvicorn's own status lines
        data = b"".join((STATUS_LINE[status], _DEFAULTS[1], lines, ending, body))
        corked = self._corked
        if corked is not None and corked._held:
            corked.write_whole(data)  # behind what is held, in order
        else:
            real.write(data)  # the transport is not closing (checked above)
        if closing or not cycle.keep_alive:
            cycle.keep_alive = False
            self.transport.close()
        elif self._deadline is None and not (
            self.pipeline or self.flow.read_paused or real.is_closing()
        ):
            # ``on_response_complete``'s common case (kept alive, nothing pipelined, reading
            # on, no next head begun, nothing held: the answer went whole) and
            # ``_set_deadline``, inline: two frames fewer a request (bench/CHANGES.md item 111).
            self.server_state.total_requests += 1
            loop = self.loop
            keep_alive = self._limits.keep_alive
            self._deadline = loop.time() + keep_alive
            self._idle = True
            if self._timer is None:
                self._timer = loop.call_later(min(keep_alive, self._tick), self._check)
            return
        self.on_response_complete()

    def _start_read(self) -> None:
        self._set_deadline(self._limits.read_timeout)

    def _set_deadline(self, seconds: float) -> None:
        self._idle = False
        self._deadline = self.loop.time() + seconds
        if self._timer is None:
            self._timer = self.loop.call_later(min(seconds, self._tick), self._check)

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None or self._closing():
            return  # nothing is being read: the next read arms the timer again
        now = self.loop.time()
        if now < deadline:
            self._timer = self.loop.call_later(min(deadline - now, self._tick), self._check)
            return
        cycle = self.cycle
        if self._in_head and cycle is not None and not cycle.response_complete:
            # Bytes of a pipelined request arrived while this one is answered: let it finish.
            self._start_read()
            return
        if self.flow.read_paused:
            # We stopped reading (a pipelined request waits for the answers before it): the
            # client is not late; its clock restarts, and runs again once reading resumes.
            self._start_read()
            return
        self.transport.close()
