"""``web.limited_protocol`` on uvicorn serving on a loopback socket in this process: the
keep-alive idle limit kept by the connection's one timer, on a real sink app (the only way to
give the idle limit a test-sized value: the command line keeps uvicorn's 30 s), and the held
writes of an answer that does not complete in one turn of the loop. Bounds on time are
generous: they tell "closed by the limit" from "never closed" and "kept" from "cut"."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from ackledger import Inbox
from ackledger.web.answers import Answer
from ackledger.web.direct import DirectRoute, Headers, Outcome, Pending, direct_routes_of
from ackledger.web.limits import Limits
from ackledger.web.server import bind
from tests.events import lab

IDLE = 0.5


@contextlib.contextmanager
def _served(
    app: ASGIApp, limits: Limits, direct: Mapping[bytes, DirectRoute] | None = None
) -> Iterator[int]:
    """``app`` served by uvicorn with our protocol (answering ``direct`` itself) on a free
    loopback port, in a thread."""
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(app, log_config=None, lifespan="off", http=limits.protocol(direct))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture(params=["direct", "asgi"])
def port(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    """The sink's app, its POST routes answered by the protocol (as ``serve sink`` does)
    or through uvicorn's cycle."""
    limits = Limits(read_timeout=5.0, keep_alive=IDLE)
    with Inbox(tmp_path / "sink.db") as inbox:
        app = inbox.asgi()
        direct = direct_routes_of(app) if request.param == "direct" else None
        with _served(app, limits, direct) as found:
            yield found


def _until_head_end(sock: socket.socket) -> bytes:
    """What ``sock`` received up to the end of an answer's head at least."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection before an answer's head"
        got += chunk
    return got


def _post_head(sock: socket.socket, port: int, event_id: str) -> bytes:
    """One event on ``sock``; returns its answer's head (the answer is read whole)."""
    body = json.dumps(lab(event_id, "s1", 1)).encode()
    request = (
        f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/cloudevents+json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(request.encode() + body)
    head, _, rest = _until_head_end(sock).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    assert json.loads(rest)["id"] == event_id
    return head


def _post(sock: socket.socket, port: int, event_id: str) -> bytes:
    """One event on ``sock``; returns its answer's status line (the answer is read whole)."""
    return _post_head(sock, port, event_id).split(b"\r\n", 1)[0]


def test_answers_carry_the_date_of_their_time(port: int) -> None:
    """uvicorn's server makes its default headers (date, server) anew once a second; the
    direct path joins them once per list made: an answer 2.2 s after another carries a later
    date, and a date within seconds of now."""
    dates = []
    for number in range(2):
        if number:
            time.sleep(2.2)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            head = _post_head(sock, port, f"dated-{number}")
        (date,) = [line[6:] for line in head.split(b"\r\n") if line.lower().startswith(b"date:")]
        dates.append(email.utils.parsedate_to_datetime(date.decode()))
    assert dates[1] > dates[0]
    assert abs(dates[1].timestamp() - time.time()) < 3


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_limit(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert _post(sock, port, "idle-1") == b"HTTP/1.1 200 OK"
        answered = time.monotonic()
        sock.settimeout(10 * IDLE + 10)
        assert sock.recv(1) == b"", "the server sent bytes on an idle connection"
        # Closed by the idle limit, not by the read time-out (5 s) or never.
        assert time.monotonic() - answered < 4.0


def test_a_connection_used_within_the_idle_limit_is_kept(port: int) -> None:
    """Requests 0.2 s apart for 6 idle limits: each answer starts a fresh idle time, so the
    timer, firing meanwhile, must never find the connection overdue."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started, number = time.monotonic(), 0
        while time.monotonic() - started < 6 * IDLE:
            assert _post(sock, port, f"kept-{number}") == b"HTTP/1.1 200 OK"
            number += 1
            time.sleep(IDLE * 0.4)
        assert number >= 6


def test_an_answer_completed_in_a_later_turn_has_its_head_sent_meanwhile() -> None:
    """A head written while the body waits (a streamed answer) leaves at the end of the
    loop's turn, not only when the answer completes: the client sees it before the body
    exists, and then the body."""
    release = threading.Event()

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"4")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        while not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"done"})

    with (
        _served(streaming, Limits()) as served_port,
        socket.create_connection(("127.0.0.1", served_port)) as sock,
    ):
        sock.settimeout(20)
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{served_port}\r\n\r\n".encode())
        got = _until_head_end(sock)
        assert got.startswith(b"HTTP/1.1 200 OK")
        assert got.endswith(b"\r\n\r\n"), "the body came before it was sent"
        release.set()
        while not got.endswith(b"done"):
            chunk = sock.recv(65536)
            assert chunk, "closed before the body"
            got += chunk


def test_idle_time_starts_after_the_body_of_a_request_refused_before_it(port: int) -> None:
    """An event over the body cap is refused from its head (413) before its body is sent;
    the body that follows must not leave the connection without an idle limit."""
    body = b"x" * (70 * 1024)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/cloudevents+json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        sock.settimeout(20)
        assert _until_head_end(sock).startswith(b"HTTP/1.1 413 ")
        sock.sendall(body)
        sent = time.monotonic()
        while sock.recv(65536):
            pass  # the rest of the refusal; then the close
        assert time.monotonic() - sent < 4.0


def _slow_then_pipelined(sock: socket.socket, port: int, then: str = "") -> None:
    """POST /slow (body "ab"), and pipelined behind it POST /fast whose body ("cdef") ends
    0.3 s after its head, followed by ``then`` (``{host}`` in it is the Host line)."""
    host = f"Host: 127.0.0.1:{port}\r\n"
    sock.sendall(
        f"POST /slow HTTP/1.1\r\n{host}Content-Length: 2\r\n\r\nab".encode()
        + f"POST /fast HTTP/1.1\r\n{host}Content-Length: 4\r\n\r\ncd".encode()
    )
    time.sleep(0.3)
    sock.sendall(b"ef" + then.format(host=host).encode())


def test_a_slow_answer_does_not_cut_the_pipelined_request_behind_it() -> None:
    """A request answered in 1.5 s, with a second one pipelined behind it whose body ends
    0.3 s later, inside the 0.5 s read time-out: both are answered, in order. The second's
    body deadline runs while the first is answered and must not close the connection."""

    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/slow":
            await asyncio.sleep(1.5)
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    with (
        _served(echo, Limits(read_timeout=0.5, keep_alive=5.0)) as served_port,
        socket.create_connection(("127.0.0.1", served_port)) as sock,
    ):
        _slow_then_pipelined(sock, served_port)
        sock.settimeout(20)
        got = b""
        while not got.endswith(b"cdef"):
            chunk = sock.recv(65536)
            assert chunk, f"closed after {got!r}"
            got += chunk
    first, second = got.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200") and first.endswith(b"\r\n\r\nab")
    assert second.startswith(b"200") and second.endswith(b"\r\n\r\ncdef")


class _Echo:
    """A direct route answering its body after ``delay`` seconds (or raising, if told)."""

    cap = 1024

    def __init__(self, delay: float, fail: bool = False) -> None:
        self.delay = delay
        self.fail = fail

    def answer(self, headers: Headers, body: bytes | None) -> Outcome:
        if self.fail:
            raise RuntimeError("a bug in a route")
        pending: Pending[bytes] = Pending(lambda done: Answer(200, done.result(), "text/plain"))
        asyncio.get_running_loop().call_later(self.delay, pending.resolve, body or b"")
        return pending


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_a_slow_direct_answer_does_not_cut_the_pipelined_request_behind_it() -> None:
    """The same on the direct path: the first answered 1.5 s later, the second's body ending
    0.3 s after its head; both answered, in order, and a route that raises gets uvicorn's
    500, closing the connection."""
    direct = {b"/slow": _Echo(1.5), b"/fast": _Echo(0.0), b"/bug": _Echo(0.0, fail=True)}
    with (
        _served(_not_found, Limits(read_timeout=0.5, keep_alive=5.0), direct) as served_port,
        socket.create_connection(("127.0.0.1", served_port)) as sock,
    ):
        _slow_then_pipelined(
            sock, served_port, "POST /bug HTTP/1.1\r\n{host}Content-Length: 0\r\n\r\n"
        )
        sock.settimeout(20)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    first, second, third = got.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200") and first.endswith(b"\r\n\r\nab")
    assert second.startswith(b"200") and second.endswith(b"\r\n\r\ncdef")
    assert third.startswith(b"500") and b"connection: close" in third
    assert third.endswith(b"Internal Server Error")


def test_a_kept_alive_connections_next_head_is_on_the_read_timeout(tmp_path: Path) -> None:
    """After an answer, the connection waits on the idle limit (30 s here); the first bytes of
    its next request start the head's read time-out (0.5 s), so a head trickled a byte at a
    time is cut off in about that, not when the idle limit would end."""
    limits = Limits(read_timeout=0.5, keep_alive=30.0)
    with Inbox(tmp_path / "sink.db") as inbox:
        app = inbox.asgi()
        with (
            _served(app, limits, direct_routes_of(app)) as served_port,
            socket.create_connection(("127.0.0.1", served_port)) as sock,
        ):
            assert _post(sock, served_port, "next-1") == b"HTTP/1.1 200 OK"
            sock.sendall(f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{served_port}\r\nX-".encode())
            started = time.monotonic()
            with pytest.raises(OSError):  # the trickle is cut
                while time.monotonic() - started < 20:
                    time.sleep(0.1)
                    sock.sendall(b"a")
                    sock.settimeout(0.01)
                    with contextlib.suppress(TimeoutError):
                        if sock.recv(1) == b"":
                            raise ConnectionResetError("closed by the server")
            assert time.monotonic() - started < 5.0
