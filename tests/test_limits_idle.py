"""The keep-alive idle limit, kept by the connection's one timer (``web.limited_protocol``),
on a real sink app served by uvicorn on a loopback socket in this process: the only way to
give the idle limit a test-sized value (the command line keeps uvicorn's 30 s). Bounds on time
are generous: they tell "closed by the limit" from "never closed" and "kept" from "cut"."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from ackledger import Inbox
from ackledger.web.limits import Limits
from ackledger.web.server import bind
from tests.events import lab

IDLE = 0.5


@pytest.fixture
def port(tmp_path: Path) -> Iterator[int]:
    limits = Limits(read_timeout=5.0, keep_alive=IDLE)
    sock = bind("127.0.0.1", 0)
    with Inbox(tmp_path / "sink.db") as inbox:
        config = uvicorn.Config(
            inbox.asgi(), log_config=None, lifespan="off", http=limits.protocol()
        )
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


def _post(sock: socket.socket, port: int, event_id: str) -> bytes:
    """One event on ``sock``; returns its answer's status line (the answer is read whole)."""
    body = json.dumps(lab(event_id, "s1", 1)).encode()
    request = (
        f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/cloudevents+json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(request.encode() + body)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection instead of answering"
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    assert json.loads(rest)["id"] == event_id
    return head.split(b"\r\n", 1)[0]


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
