"""What one connection may cost the services: a capped request head, time-outs on reading
the head and the body, an idle limit between requests, and a cap on connections (the
protocol that enforces the first two is ``web.limited_protocol``; uvicorn keeps the others).

Plain data, importable without uvicorn (the command line reads the defaults for its help).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

#: Enough for any head our clients send (a few hundred bytes) and for proxies' additions.
MAX_HEAD_BYTES = 64 * 1024
READ_TIMEOUT_S = 10.0
#: How long a kept-alive connection may sit idle between an answer and its next request
#: (whole seconds: uvicorn's ``timeout_keep_alive`` is an int).
KEEP_ALIVE_S = 30
#: Connections (and requests in flight) beyond which uvicorn answers 503 at once.
MAX_CONNECTIONS = 1000


@dataclass(frozen=True)
class Limits:
    head_bytes: int = MAX_HEAD_BYTES
    read_timeout: float = READ_TIMEOUT_S
    keep_alive: int = KEEP_ALIVE_S
    max_connections: int = MAX_CONNECTIONS

    def uvicorn_options(self) -> dict[str, Any]:
        """The ``uvicorn.Config`` options that keep these limits: our protocol (the head cap
        and the read time-outs) and uvicorn's own idle limit and connection cap."""
        from .limited_protocol import LimitedHttpTools

        return {
            "http": functools.partial(LimitedHttpTools, limits=self),
            "timeout_keep_alive": self.keep_alive,
            "limit_concurrency": self.max_connections,
            # h11's own head cap, should that protocol ever be chosen instead.
            "h11_max_incomplete_event_size": self.head_bytes,
        }
