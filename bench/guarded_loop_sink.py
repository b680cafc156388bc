"""The guarded loop sink: the guarded sink's rules for one event (``guarded_sink.py``, whose
functions it calls) served as ``serve sink`` serves them, with the service's duties, each in
the most direct form found:

- many clients at once on one event loop: an ``asyncio.Protocol`` per connection on uvloop,
  parsing with httptools (llhttp), as uvicorn does for ``serve sink``;
- the limits of ``ackledger.web.limits`` (their defaults): a head over 64 KiB is answered 431
  and the connection closed; a head must be complete ``--read-timeout`` seconds (10) after
  its first byte, a body after its head, and a kept-alive connection must begin its next
  request within 30 s, else the connection is closed; past 1000 connections a new one is
  answered 503 and closed; a body over 64 KiB is answered 413 (the guarded rules);
- pipelined requests answered in order: one request of a connection at a time; while its
  answer waits for a commit, the requests behind it wait and reading is paused;
- group commit: the new events of every connection that are ready in one turn of the loop
  share one FULL transaction, and each is answered only after its commit.

Time-outs as ``ackledger.web.limited_protocol`` keeps them: one deadline and at most one timer
per connection, re-armed when it fires early, never created and cancelled per request.

``python -m bench.guarded_loop_sink --db DB [--read-timeout S] [--max-connections N] [--once]``
prints its URL; it imports the standard library, uvloop, httptools and ``guarded_sink``, no
ackledger code.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from typing import cast

import httptools
import uvloop

from .guarded_sink import Checked, Inbox, Refused, acked, answer, checked, refusal, request_fields

MAX_HEAD = 64 * 1024
READ_TIMEOUT = 10.0
KEEP_ALIVE = 30.0
MAX_CONNECTIONS = 1000
_BUSY = answer(503, b'{"status":503,"detail":"too many connections"}')

#: A request parsed: its body, or the answer that refuses it and whether that ends the
#: connection (a head that failed its rules: its framing is not trusted).
Request = tuple[bytes | None, bytes, bool]


class GroupCommit:
    """The new events handed in during one turn of the loop, applied in one FULL commit at
    its end; each connection is answered after it."""

    def __init__(self, inbox: Inbox, loop: asyncio.AbstractEventLoop) -> None:
        self.inbox = inbox
        self.loop = loop
        self.waiting: list[tuple[Connection, Checked]] = []
        #: Commits made (read by nothing here; a debugger's and a reader's count).
        self.commits = 0

    def add(self, connection: Connection, event: Checked) -> None:
        if not self.waiting:
            self.loop.call_soon(self.flush)
        self.waiting.append((connection, event))

    def flush(self) -> None:
        waiting, self.waiting = self.waiting, []
        inbox, now = self.inbox, time.time()
        full = inbox.full
        full.execute("BEGIN IMMEDIATE")
        applied = [inbox.apply_new(event, now) for _, event in waiting]
        full.execute("COMMIT")
        self.commits += 1
        for (connection, event), done in zip(waiting, applied, strict=True):
            event_id, source, fingerprint = event[:3]
            if done:
                connection.answered(acked(event_id, source, "applied"))
                continue
            # Claimed since its read (by an event before it in this group, or another
            # writer): decided on what is stored now, as the guarded sink decides.
            try:
                stored = inbox.find(event_id, source) or ""
                status = inbox.seen(event_id, source, fingerprint, stored, now)
                connection.answered(acked(event_id, source, status))
            except Refused as problem:
                connection.answered(refusal(problem))


class Server:
    """What the connections share: the inbox, the group commit, the limits."""

    def __init__(self, inbox: Inbox, argv: list[str], once: asyncio.Future[None] | None):
        self.loop = asyncio.get_running_loop()
        read_timeout = _option(argv, "--read-timeout", READ_TIMEOUT)
        self.max_connections = int(_option(argv, "--max-connections", MAX_CONNECTIONS))
        self.inbox = inbox
        self.group = GroupCommit(inbox, self.loop)
        self.read_timeout = read_timeout
        self.tick = min(read_timeout, KEEP_ALIVE)
        self.open = 0
        #: --once: set when the first connection ends.
        self.once = once


class Connection(asyncio.Protocol):
    """One client: its parser, its queue of parsed requests, its one deadline and timer."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.requests: deque[Request] = deque()
        #: An answer of this connection waits for the group commit.
        self.waiting = False
        #: Reading is paused: pipelined requests wait behind the waiting one.
        self.paused = False
        self.closed = False
        self.in_head = True
        self.head_bytes = 0
        #: The head failed its rules: what follows on this connection is not read.
        self.refused = False
        self.target = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.keep_alive = True
        #: The waiting request's connection ends with its answer.
        self.ending = False
        #: The loop time by which the read in progress must be complete, or an idle
        #: connection begin its next request; None: neither is awaited.
        self.deadline: float | None = None
        self.idle = False
        self.timer: asyncio.TimerHandle | None = None

    # The connection.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport has a Transport's methods without being its subclass.
        self.transport = transport = cast("asyncio.Transport", transport)
        server = self.server
        server.open += 1
        if server.open > server.max_connections:
            self.closed = True
            transport.write(_BUSY)
            transport.close()
            return
        self.set_deadline(server.read_timeout)  # the first head's clock

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.deadline = None
        self.requests.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.server.open -= 1
        once = self.server.once
        if once is not None and not once.done():
            once.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.closed or self.refused:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if not self.refused:
                self.requests.append((None, refusal(Refused(400, "malformed request")), True))
                self.refused = True
        if self.in_head and not self.refused:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD:
                self.requests.append((None, refusal(Refused(431, "head over 64 KiB")), True))
                self.refused = True
        self.next_request()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.transport is not None
            self.transport.close()

    # The parser's callbacks (httptools calls them within feed_data).

    def on_message_begin(self) -> None:
        # The head's first byte: its clock starts (ending a kept-alive connection's idle time).
        self.set_deadline(self.server.read_timeout)
        self.target = b""
        self.fields = []
        self.chunks = []

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.in_head = False
        self.head_bytes = 0
        parser = self.parser
        try:
            if parser.get_http_version() != "1.1":
                raise Refused(400, "request line: HTTP/1.1 only")
            if parser.get_method() != b"POST":
                raise Refused(405, "method: only POST")
            self.size = request_fields(self.target, self.fields)
        except Refused as problem:
            self.requests.append((None, refusal(problem), True))
            self.refused = True
            self.deadline = None
            return
        self.keep_alive = parser.should_keep_alive()
        if self.size:
            self.set_deadline(self.server.read_timeout)  # the body's clock

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            self.chunks.append(body)  # at most MAX_BODY: its Content-Length was checked

    def on_message_complete(self) -> None:
        if self.refused:
            return
        self.in_head = True
        self.deadline = None  # the next head's clock starts with its first byte
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.requests.append((body, b"", not self.keep_alive))

    # The answers, one request at a time and in order.

    def next_request(self) -> None:
        transport = self.transport
        assert transport is not None
        while self.requests and not self.waiting and not self.closed:
            body, refused, ending = self.requests.popleft()
            if body is None:
                transport.write(refused)
                self.close()
                return
            try:
                event = checked(body)
                stored = self.server.inbox.find(event[0], event[1])
                if stored is None:
                    # A new event: answered after the group's commit.
                    self.waiting = True
                    self.ending = ending
                    self.server.group.add(self, event)
                    break
                status = self.server.inbox.seen(*event[:3], stored, time.time())
                transport.write(acked(event[0], event[1], status))
            except Refused as problem:
                transport.write(refusal(problem))
            if ending:
                self.close()
                return
        if self.waiting:
            if self.requests and not self.paused:
                # Pipelined requests wait behind this answer: read no more till it is sent (as
                # ackledger does; a client that waits for each answer never costs the calls).
                self.paused = True
                transport.pause_reading()
            return
        if not self.requests and not self.closed and self.deadline is None:
            self.set_deadline(KEEP_ALIVE)
            self.idle = True

    def answered(self, data: bytes) -> None:
        """The group commit's answer to this connection's waiting request."""
        self.waiting = False
        if self.closed:
            return  # the client left: its event is applied, the answer dropped
        assert self.transport is not None
        self.transport.write(data)
        if self.ending:
            self.close()
            return
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        self.next_request()

    # The one timer.

    def set_deadline(self, seconds: float) -> None:
        self.idle = False
        self.deadline = self.loop.time() + seconds
        if self.timer is None:
            self.timer = self.loop.call_later(min(seconds, self.server.tick), self.check)

    def check(self) -> None:
        self.timer = None
        deadline = self.deadline
        if deadline is None or self.closed:
            return  # nothing is being read: the next read arms the timer again
        now = self.loop.time()
        if now < deadline:
            self.timer = self.loop.call_later(min(deadline - now, self.server.tick), self.check)
        elif self.waiting:
            # This connection's answer waits for a commit: the client is not late.
            self.set_deadline(self.server.read_timeout)
        else:
            self.close()


def _option(argv: list[str], name: str, default: float) -> float:
    """A limit from the command line (the tests shorten them), else ackledger's default."""
    return float(argv[argv.index(name) + 1]) if name in argv else default


async def serve(argv: list[str]) -> None:
    inbox = Inbox(argv[argv.index("--db") + 1])
    loop = asyncio.get_running_loop()
    once = loop.create_future() if "--once" in argv else None
    server = Server(inbox, argv, once)
    listener = await loop.create_server(lambda: Connection(server), "127.0.0.1", 0, backlog=1024)
    port = listener.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    if once is not None:
        await once  # bench.guarded_instructions counts one connection's life
    else:
        await loop.create_future()  # until killed


def main(argv: list[str]) -> None:
    uvloop.run(serve(argv))


if __name__ == "__main__":
    main(sys.argv)
