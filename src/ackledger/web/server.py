"""Run an ASGI app under uvicorn on a socket we bind ourselves.

Binding first lets ``--port 0`` pick a free port and lets us print the real address before
serving, which is how scripts and tests learn where a service listens.
"""

from __future__ import annotations

import socket
import sys

import uvicorn
from starlette.types import ASGIApp

from .limits import Limits


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Naming IPPROTO_TCP matters: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets whose proto says TCP, and accepted sockets copy the listener's. With proto 0, a
    # server that writes the head and the body of an answer separately (uvicorn does) waits
    # for the client's delayed ACK, about 40 ms, on every keep-alive request. TCP_NODELAY on
    # the listener is inherited by accepted sockets on Linux as well.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def serve(app: ASGIApp, sock: socket.socket, name: str, limits: Limits | None = None) -> None:
    print(f"ackledger {name} listening on {url_of(sock)}", flush=True)
    limits = limits or Limits()
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=30,
        # The head cap and the read time-outs (web.limits); h11's own cap, should it be used.
        http=limits.protocol(),
        h11_max_incomplete_event_size=limits.head_bytes,
        limit_concurrency=limits.max_connections,
    )
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    print(f"ackledger {name} stopped", file=sys.stderr, flush=True)
