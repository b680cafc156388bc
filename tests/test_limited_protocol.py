"""``web.limits`` kept by uvicorn with ``web.limited_protocol``, serving on a loopback socket
in this process: the idle limit on a real sink app (the only way to give it a test-sized
value: the command line keeps 30 s), the read time-outs around pipelined and slow answers, and
the head cap however the head arrives. Bounds on time are generous: they tell "closed by the
limit" from "never closed" and "kept" from "cut"."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from ackledger import Inbox
from ackledger.web.limits import Limits
from ackledger.web.server import bind
from tests.events import lab
from tests.test_sink_connections import _Reader

IDLE = 1


@contextlib.contextmanager
def _served(app: ASGIApp, limits: Limits) -> Iterator[int]:
    """``app`` served by uvicorn with ``limits`` (as ``web.server`` serves it) on a free
    loopback port, in a thread."""
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(app, log_config=None, lifespan="off", **limits.uvicorn_options())
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


@pytest.fixture
def port(tmp_path: Path) -> Iterator[int]:
    """The sink's app, as ``serve sink`` serves it but for the idle limit."""
    limits = Limits(read_timeout=5.0, keep_alive=IDLE)
    with Inbox(tmp_path / "sink.db") as inbox, _served(inbox.asgi(), limits) as found:
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
    """An answer 2.2 s after another carries a later date, and a date within seconds of
    now."""
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
        assert time.monotonic() - answered < 4.5


def test_a_connection_used_within_the_idle_limit_is_kept(port: int) -> None:
    """Requests 0.4 s apart for 3 idle limits: each answer starts a fresh idle time, so the
    timer, firing meanwhile, must never find the connection overdue."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started, number = time.monotonic(), 0
        while time.monotonic() - started < 3 * IDLE:
            assert _post(sock, port, f"kept-{number}") == b"HTTP/1.1 200 OK"
            number += 1
            time.sleep(IDLE * 0.4)
        assert number >= 5


def test_an_answer_completed_in_a_later_turn_has_its_head_sent_meanwhile() -> None:
    """A head written while the body waits (a streamed answer) leaves at once, not only when
    the answer completes: the client sees it before the body exists, and then the body."""
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


def test_a_slow_answer_does_not_cut_the_pipelined_request_behind_it() -> None:
    """A request answered in 1.5 s, with a second one pipelined behind it whose body ends
    0.3 s after its head, inside the 0.5 s read time-out, and a third whose app raises: all
    answered, in order (the third with uvicorn's 500, closing the connection). The second's
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
        elif scope["path"] == "/bug":
            raise RuntimeError("a bug in a route")
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    with (
        _served(echo, Limits(read_timeout=0.5, keep_alive=5)) as served_port,
        socket.create_connection(("127.0.0.1", served_port)) as sock,
    ):
        host = f"Host: 127.0.0.1:{served_port}\r\n"
        sock.sendall(
            f"POST /slow HTTP/1.1\r\n{host}Content-Length: 2\r\n\r\nab".encode()
            + f"POST /fast HTTP/1.1\r\n{host}Content-Length: 4\r\n\r\ncd".encode()
        )
        time.sleep(0.3)
        sock.sendall(b"ef" + f"POST /bug HTTP/1.1\r\n{host}Content-Length: 0\r\n\r\n".encode())
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
    limits = Limits(read_timeout=0.5, keep_alive=30)
    with (
        Inbox(tmp_path / "sink.db") as inbox,
        _served(inbox.asgi(), limits) as served_port,
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


class _Recorder:
    """An app answering 200 with the path it was asked for, and noting every request."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        self.paths.append(scope["path"])
        body = scope["path"].encode()
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


_KIB = 1024
_HOST = "Host: 127.0.0.1\r\n"
#: Heads of about 100 KiB, each sent in one write: one long header, many short ones, a long
#: URL, and a long header followed by bytes the parser would refuse.
_BIG_HEADS = {
    "one-header": f"GET /big HTTP/1.1\r\n{_HOST}X-Big: {'a' * 100 * _KIB}\r\n\r\n",
    "many-headers": f"GET /big HTTP/1.1\r\n{_HOST}" + "X-Many: abcdefgh\r\n" * 6000 + "\r\n",
    "long-url": f"GET /big?{'q' * 100 * _KIB} HTTP/1.1\r\n{_HOST}\r\n",
    "then-garbage": f"GET /big HTTP/1.1\r\n{_HOST}X-Big: {'a' * 100 * _KIB}\r\n\r\n\x00\x01\r\n",
}


@pytest.mark.parametrize("head", list(_BIG_HEADS.values()), ids=list(_BIG_HEADS))
def test_a_head_over_the_cap_in_one_write_is_refused(head: str) -> None:
    """A 100 KiB head sent whole (so that the parser may see all of it in one read) gets 431
    and a closed connection, and never reaches the app; a request before it in the same
    write is answered first."""
    app = _Recorder()
    with (
        _served(app, Limits()) as served_port,
        socket.create_connection(("127.0.0.1", served_port)) as sock,
    ):
        sock.sendall(f"GET /first HTTP/1.1\r\n{_HOST}\r\n".encode() + head.encode("latin-1"))
        got = _until_closed(sock)
    first, refusal = got.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 ") and first.endswith(b"/first")
    assert refusal.startswith(b"431 ") and b"connection: close" in refusal
    assert refusal.endswith(b'"detail":"the request head is over 65536 bytes"}')
    assert app.paths == ["/first"]


def _bodies(reader: _Reader, count: int) -> list[bytes]:
    """The bodies of the next ``count`` answers, each a 200."""
    answers = [reader.answer() for _ in range(count)]
    assert [status for status, _, _ in answers] == [200] * count
    return [body for _, _, body in answers]


def test_heads_under_the_cap_are_served_however_they_arrive() -> None:
    """A 60 KiB head in one write, the same head in 1 KiB pieces, and a head that begins in
    the read that ends a 60 KiB body and goes on in later reads: all answered."""
    app = _Recorder()
    padding = f"X-Pad: {'p' * 60 * _KIB}\r\n"
    with (
        _served(app, Limits()) as served_port,
        socket.create_connection(("127.0.0.1", served_port)) as sock,
    ):
        reader = _Reader(sock)
        sock.sendall(f"GET /whole HTTP/1.1\r\n{_HOST}{padding}\r\n".encode())
        assert _bodies(reader, 1) == [b"/whole"]
        pieced = f"GET /pieces HTTP/1.1\r\n{_HOST}{padding}\r\n".encode()
        for start in range(0, len(pieced), _KIB):
            sock.sendall(pieced[start : start + _KIB])
            time.sleep(0.001)
        assert _bodies(reader, 1) == [b"/pieces"]
        body = b"b" * 60 * _KIB
        sock.sendall(
            f"POST /body HTTP/1.1\r\n{_HOST}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
            + b"GET /after HTTP/1.1\r\n"
        )
        time.sleep(0.1)
        sock.sendall(f"{_HOST}X-Pad: {'p' * 4 * _KIB}".encode())
        time.sleep(0.1)
        sock.sendall(b"\r\n\r\n")
        assert _bodies(reader, 2) == [b"/body", b"/after"]
    assert app.paths == ["/whole", "/pieces", "/body", "/after"]


def test_a_connection_past_the_cap_is_answered_503() -> None:
    """With three connections allowed, two open (each answered once, so both are the
    server's), a third one's request gets 503; once the two are closed, a new connection is
    served."""
    app = _Recorder()
    with _served(app, Limits(max_connections=3)) as served_port:
        held = [socket.create_connection(("127.0.0.1", served_port)) for _ in range(2)]
        try:
            for sock in held:
                sock.sendall(f"GET /held HTTP/1.1\r\n{_HOST}\r\n".encode())
                assert _bodies(_Reader(sock), 1) == [b"/held"]
            with socket.create_connection(("127.0.0.1", served_port)) as third:
                third.sendall(f"GET /third HTTP/1.1\r\n{_HOST}\r\n".encode())
                assert _until_head_end(third).startswith(b"HTTP/1.1 503 ")
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 20
        while True:
            with socket.create_connection(("127.0.0.1", served_port)) as later:
                later.sendall(f"GET /later HTTP/1.1\r\n{_HOST}\r\n".encode())
                if _until_head_end(later).startswith(b"HTTP/1.1 200 "):
                    break
            assert time.monotonic() < deadline, "the closed connections were never let go"
            time.sleep(0.05)
    assert app.paths[:2] == ["/held", "/held"] and "/third" not in app.paths
    assert app.paths[-1] == "/later"
