"""A scripted raw-socket HTTP server on loopback, for talking to ``send_http`` badly on purpose."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

import pytest

from ackledger._core.closing import Closing

# Given the request body, return the raw bytes to answer with, or None to close silently.
Script = Callable[[bytes], bytes | None]


def http_answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    reason = {200: "OK", 302: "Found", 500: "Internal Server Error"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def forbid_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Make any connection or name look-up fail the test; returns what was attempted."""
    touched: list[object] = []

    def forbidden(*args: object, **kwargs: object) -> None:
        touched.append(args)
        raise AssertionError("no connection or lookup may happen")

    monkeypatch.setattr(socket, "create_connection", forbidden)
    monkeypatch.setattr(socket, "getaddrinfo", forbidden)
    # Clients that connect a socket of their own (pika does) are caught here.
    monkeypatch.setattr(socket.socket, "connect", forbidden)
    monkeypatch.setattr(socket.socket, "connect_ex", forbidden)
    return touched


class RawServer(Closing):
    def __init__(self, script: Script, *, close_after_answer: bool = False) -> None:
        self.script = script
        #: Close each connection right after answering, as an idle keep-alive timeout would.
        self.close_after_answer = close_after_answer
        self.connections = 0
        self.requests: list[bytes] = []
        #: Each request's head (request line and header lines), in arrival order.
        self.heads: list[bytes] = []
        self.bytes_sent = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _read_request(
        self, conn: socket.socket, buffer: bytes
    ) -> tuple[bytes, bytes, bytes] | None:
        while b"\r\n\r\n" not in buffer:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buffer += chunk
        head, rest = buffer.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return head, rest[:length], rest[length:]

    def _handle(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                try:
                    got = self._read_request(conn, buffer)
                except OSError:
                    # A client that closes with our answer unread resets the connection.
                    return
                if got is None:
                    return
                head, body, buffer = got
                self.heads.append(head)
                self.requests.append(body)
                answer = self.script(body)
                if answer is None:
                    return
                try:
                    self._send(conn, answer)
                except OSError:
                    return
                if self.close_after_answer:
                    return

    def _send(self, conn: socket.socket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sent = conn.send(view[:65536])
            self.bytes_sent += sent
            view = view[sent:]

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()


def header(head: bytes, name: str) -> bytes | None:
    """The value of the header ``name`` in a request ``head`` (None if it has none)."""
    for line in head.split(b"\r\n")[1:]:
        found, _, value = line.partition(b":")
        if found.strip().lower() == name.lower().encode():
            return value.strip()
    return None


class CutServer(RawServer):
    """Ends its side of the connection right after each answer, however short it is."""

    def _send(self, conn: socket.socket, data: bytes) -> None:
        super()._send(conn, data)
        conn.shutdown(socket.SHUT_WR)
