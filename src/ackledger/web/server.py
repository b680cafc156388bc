"""Run an ASGI app under uvicorn on a socket we bind ourselves.

Binding first lets ``--port 0`` pick a free port and lets us print the real address before
serving, which is how scripts and tests learn where a service listens.

SIGTERM (what Kubernetes sends) and SIGINT stop the service gracefully: it stops accepting,
finishes the requests in flight (for up to ``GRACEFUL_SECONDS``), prints "stopped" and exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from .._core.logline import install
from .limits import Limits
from .observe import ACCESS_LOG

#: How long a stop waits for the requests in flight: inside Kubernetes' default grace (30 s).
GRACEFUL_SECONDS = 20
LOG_LEVELS = ("debug", "info", "warning", "error")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class LogSettings:
    """``--log-level``, ``--access-log`` and ``--log-format`` of a service."""

    level: str = "warning"
    access_log: bool = False
    format: str = "text"


def configure_logging(settings: LogSettings) -> None:
    """Our lines and uvicorn's on stderr in one format; the access log at INFO when asked
    for, whatever the level of the rest."""
    if settings.level not in LOG_LEVELS:
        raise ValueError(f"log level: must be one of {', '.join(LOG_LEVELS)}")
    level = getattr(logging, settings.level.upper())
    for name in ("ackledger", "uvicorn"):
        logger = logging.getLogger(name)
        install(logger, settings.format)
        logger.setLevel(level)
    # Above CRITICAL: off, and the per-request check (isEnabledFor) stays a cached lookup.
    ACCESS_LOG.setLevel(logging.INFO if settings.access_log else logging.CRITICAL + 1)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own version re-raises the signal once it has shut down, so the process
        # dies of it (exit 143 on SIGTERM) after a clean stop. A stop on request is a clean
        # exit here: the same graceful shutdown, then return.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


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


def serve(
    app: ASGIApp,
    sock: socket.socket,
    name: str,
    log: LogSettings | None = None,
    limits: Limits | None = None,
) -> None:
    settings = log or LogSettings()
    configure_logging(settings)
    limits = limits or Limits()
    config = uvicorn.Config(
        app,
        log_config=None,  # configure_logging above
        log_level=settings.level,
        access_log=False,  # ours (web.observe) has the route and the time
        # X-Forwarded-* would only rewrite the client address and scheme, which nothing here
        # reads; uvicorn's middleware for them cost 1.5% of the sink's samples in a profile.
        proxy_headers=False,
        lifespan="off",
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        # The head cap, the read time-outs, the idle limit and the connection cap.
        **limits.uvicorn_options(),
    )
    server = _Server(config)
    # A stop asked for between "listening" and uvicorn's own handlers is a graceful one too
    # (uvicorn checks should_exit once started).
    with server.capture_signals():
        print(f"ackledger {name} listening on {url_of(sock)}", flush=True)
        server.run(sockets=[sock])
    print(f"ackledger {name} stopped", file=sys.stderr, flush=True)
