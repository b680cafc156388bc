"""A small fault-injecting TCP proxy for drills, the demo and the tests (loopback only).

It forwards each client connection to an upstream service. While ``drop_responses`` is above
zero, a connection's request is forwarded but, as soon as the upstream starts answering, both
sides are closed and the answer is thrown away: the service committed, the client never heard.
That is the "response lost after the sink's commit" seam, made on demand.

With ``cut_before`` it cuts a connection mid-stream instead, once: the first connection whose
client bytes reach the ``cut_at``-th occurrence of that pattern (a broker protocol's publish
frame, say) has only what came before it forwarded; the rest is held back, the upstream's
answers to what it did get flow for ``cut_hold_s`` more, and then both sides are closed. Later
connections pass untouched: the cut has healed. ``arm_cut`` arms another one while the proxy
runs (``verify``), counted from the next bytes of every open connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from .._core.closing import Closing


class FaultProxy(Closing):
    def __init__(
        self,
        upstream_port: int,
        *,
        drop_responses: int = 0,
        delay_responses: float = 0.0,
        cut_before: bytes = b"",
        cut_at: int = 1,
        cut_hold_s: float = 1.0,
    ) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.drop_responses = drop_responses
        #: Seconds to hold each answer (after the upstream committed) before passing it on:
        #: widens the window in which the client is waiting for an ACK.
        self.delay_responses = delay_responses
        self.dropped = 0
        self.cut_before, self.cut_at, self.cut_hold_s = cut_before, cut_at, cut_hold_s
        self.cuts = 0
        self._armed = 0  # bumped by arm_cut: a connection's count starts again
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def _take_drop(self) -> bool:
        with self._lock:
            if self.drop_responses > 0:
                self.drop_responses -= 1
                self.dropped += 1
                return True
            return False

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts == 0:
                self.cuts = 1
                return True
            return False

    def arm_cut(self, pattern: bytes, at: int) -> None:
        """Cut once more: at the ``at``-th ``pattern`` a connection sends from now on."""
        with self._lock:
            self.cut_before, self.cut_at = pattern, at
            self.cuts = 0
            self._armed += 1

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        threading.Thread(target=self._pump_up, args=(client, upstream), daemon=True).start()
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if self._take_drop():
                    break  # the upstream has answered, so it has committed: cut the answer
                if self.delay_responses > 0:
                    time.sleep(self.delay_responses)
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _pump_up(self, client: socket.socket, upstream: socket.socket) -> None:
        scan: _Occurrences | None = None
        armed = -1
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                at = None
                if self.cut_before and self.cuts == 0:
                    if scan is None or armed != self._armed:
                        scan, armed = _Occurrences(self.cut_before, self.cut_at), self._armed
                    at = scan.find(data)
                if at is not None and self._take_cut():
                    upstream.sendall(data[:at])
                    time.sleep(self.cut_hold_s)  # the answers to what got through still flow
                    _close(client, upstream)
                    return
                upstream.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        # shutdown first: close() alone does not send FIN while the other pump thread still
        # sits in recv() on the same socket.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


class _Occurrences:
    """Counts a pattern through a byte stream that comes in chunks of any size."""

    def __init__(self, pattern: bytes, nth: int) -> None:
        self.pattern, self.left = pattern, nth
        self._tail = b""  # the last len(pattern) - 1 bytes: an occurrence may straddle chunks

    def find(self, data: bytes) -> int | None:
        """Where in ``data`` the nth occurrence begins (0 if it began in an earlier chunk),
        or None if it has not come yet."""
        window = self._tail + data
        start = window.find(self.pattern)
        while start != -1:
            self.left -= 1
            if self.left == 0:
                return max(0, start - len(self._tail))
            start = window.find(self.pattern, start + 1)
        self._tail = window[max(0, len(window) - len(self.pattern) + 1) :]
        return None
