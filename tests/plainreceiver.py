"""A plain HTTP receiver on loopback (the standard library's server): it answers every POST
with a scripted status, headers and body, and keeps each request's arrival time. It stands
for receivers that speak HTTP but not ackledger's ACK (Knative's 202, a 204, an empty 200)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ackledger._core.closing import Closing

#: (status, headers, body) for the n-th request (from 0) and its body.
Answer = tuple[int, dict[str, str], bytes]
Script = Callable[[int, bytes], Answer]


class PlainReceiver(Closing):
    def __init__(self, script: Script) -> None:
        self.script = script
        #: time.monotonic() of each request, and its path.
        self.arrivals: list[float] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                sent = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.arrivals.append(time.monotonic())
                receiver.paths.append(self.path)
                status, headers, body = receiver.script(len(receiver.arrivals) - 1, sent)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if status != 204:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if status != 204:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def always(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Script:
    return lambda n, sent: (status, headers or {}, body)
