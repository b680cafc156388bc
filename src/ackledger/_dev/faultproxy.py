"""A small fault-injecting TCP proxy for drills, the demo and the tests (loopback only).

It forwards each client connection to an upstream service. While ``drop_responses`` is above
zero, a connection's request is forwarded but, as soon as the upstream starts answering, both
sides are closed and the answer is thrown away: the service committed, the client never heard.
That is the "response lost after the sink's commit" seam, made on demand.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from .._core.closing import Closing


class FaultProxy(Closing):
    def __init__(
        self, upstream_port: int, *, drop_responses: int = 0, delay_responses: float = 0.0
    ) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.drop_responses = drop_responses
        #: Seconds to hold each answer (after the upstream committed) before passing it on:
        #: widens the window in which the client is waiting for an ACK.
        self.delay_responses = delay_responses
        self.dropped = 0
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
            for sock in (client, upstream):
                # shutdown first: close() alone does not send FIN while the other pump thread
                # still sits in recv() on the same socket.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    @staticmethod
    def _pump_up(client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                upstream.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
