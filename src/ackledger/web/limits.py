"""What one connection may cost the services: a capped request head, and time-outs on reading
the head and the body (the protocol that enforces them is ``web.limited_protocol``).

Plain data, importable without uvicorn (the command line reads the defaults for its help).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Enough for any head our clients send (a few hundred bytes) and for proxies' additions.
MAX_HEAD_BYTES = 64 * 1024
READ_TIMEOUT_S = 10.0
#: How long a kept-alive connection may sit idle between an answer and its next request.
KEEP_ALIVE_S = 30.0
#: Connections (and requests in flight) beyond which uvicorn answers 503 at once.
MAX_CONNECTIONS = 1000


@dataclass(frozen=True)
class Limits:
    head_bytes: int = MAX_HEAD_BYTES
    read_timeout: float = READ_TIMEOUT_S
    keep_alive: float = KEEP_ALIVE_S
    max_connections: int = MAX_CONNECTIONS

    def protocol(self, direct: Mapping[bytes, Any] | None = None) -> Any:
        """The protocol factory uvicorn's ``Config(http=...)`` takes, answering ``direct``
        (raw path -> ``web.direct.DirectRoute``) itself."""
        from .limited_protocol import LimitedHttpTools

        return functools.partial(LimitedHttpTools, limits=self, direct=direct)
