"""Server limits on real service processes (a head cap, read time-outs) and the sender's
deadline against a real slow server on loopback. Bounds on time here are generous
(10x or more what is expected): they tell "closed by the time-out" from "never closed"."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ackledger import send_http, send_http_batch
from ackledger.ops.processes import Service, start_service
from tests.events import lab

HEAD_PROBE_BYTES = 128 * 1024 * 1024


@pytest.fixture(params=["sink", "ledger"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Service]:
    args = ["serve", request.param, "--db", str(tmp_path / "db.sqlite"), "--port", "0"]
    with start_service([*args, "--read-timeout", "1"]) as running:
        yield running


def _healthz(service: Service) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def _closed_by_server(sock: socket.socket, within: float) -> bytes:
    """What the server sent before it closed the connection; fails if it kept it open."""
    sock.settimeout(within)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {within} s")
    except ConnectionResetError:
        pass
    return got


@pytest.mark.slow
def test_a_128_mib_header_is_refused_and_the_server_stays_responsive(service: Service) -> None:
    probe = socket.create_connection(("127.0.0.1", service.port))
    sent = 0
    answer = b""

    def push() -> None:
        nonlocal sent
        probe.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\n".encode())
        chunk = b"X-Big: " + b"a" * (1024 * 1024 - 7)
        try:
            while sent < HEAD_PROBE_BYTES:
                probe.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server closed it: what the test wants

    pusher = threading.Thread(target=push)
    pusher.start()
    try:
        # Answered while the probe runs (or right after it was refused).
        assert _healthz(service) == 200
        answer = _closed_by_server(probe, within=60)
        pusher.join(60)
    finally:
        probe.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert sent < HEAD_PROBE_BYTES  # refused long before the end of the header
    assert _healthz(service) == 200


@pytest.mark.slow
def test_slowloris_connections_are_closed_after_the_read_timeout(service: Service) -> None:
    """Heads sent a byte at a time, a silent connection, and a body that stops: each is closed
    by the server (read time-out 1 s) while it still trickles."""
    head = f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\nX-Slow: ".encode()
    slow = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(4)]
    silent = socket.create_connection(("127.0.0.1", service.port))
    body = socket.create_connection(("127.0.0.1", service.port))
    body.sendall(
        f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
    )
    closed: list[socket.socket] = []
    started = time.monotonic()
    try:
        for sock in slow:
            sock.sendall(head)
        while len(closed) < len(slow) and time.monotonic() - started < 30:
            for sock in slow:
                if sock in closed:
                    continue
                try:
                    sock.sendall(b"a")
                except OSError:
                    closed.append(sock)
            time.sleep(0.2)
        assert len(closed) == len(slow), "a slow head was never cut off"
        assert _healthz(service) == 200
        for sock in (silent, body):
            assert b"200 OK" not in _closed_by_server(sock, within=30)
    finally:
        for sock in (*slow, silent, body):
            sock.close()


class _DripServer:
    """A real HTTP server on loopback that answers one byte a second (never finishing soon)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)
            answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n"
            for byte in answer + b"\r\n" + b" " * 200:
                if self.stop.wait(1.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(5)


def _one(port: int) -> object:
    return send_http(lab("drip-1", "s", 1), f"http://127.0.0.1:{port}/events", timeout=2)


def _batch(port: int) -> object:
    # The batch's kept-connection path shares the per-item one's single deadline.
    events = [lab("drip-2", "s", 1), lab("drip-3", "s", 1)]
    return send_http_batch(events, f"http://127.0.0.1:{port}/events/batch", timeout=2)


@pytest.mark.slow
@pytest.mark.parametrize("send", [_one, _batch], ids=["one", "batch"])
def test_a_slow_server_cannot_hold_a_sender_past_its_timeout(send: Callable[[int], object]) -> None:
    server = _DripServer()
    try:
        started = time.monotonic()
        with pytest.raises(OSError):
            send(server.port)
        took = time.monotonic() - started
    finally:
        server.close()
    # Per read, each byte arriving within a second would reset a 2 s time-out (the answer
    # would take over 200 s); the whole call is bounded by 2 s (slack for a loaded machine).
    assert took < 20, took
