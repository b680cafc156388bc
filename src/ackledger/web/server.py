"""Run an ASGI app under uvicorn on a socket we bind ourselves.

Binding first lets ``--port 0`` pick a free port and lets us print the real address before
serving, which is how scripts and tests learn where a service listens.
"""

from __future__ import annotations

import socket
import sys

import uvicorn
from starlette.types import ASGIApp


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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


def serve(app: ASGIApp, sock: socket.socket, name: str) -> None:
    print(f"ackledger {name} listening on {url_of(sock)}", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    print(f"ackledger {name} stopped", file=sys.stderr, flush=True)
