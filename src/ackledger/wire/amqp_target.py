"""Where an AMQP publish may go:
``amqp://USER:PASS@HOST:PORT/VHOST?exchange=E[&routing_key=K][&mode=binary]``.

Parsed and checked against the allow-list before any connection or name look-up, like every
target (``targets``). The password is kept apart from everything that may be printed: the
target's ``shown`` form and its repr never hold it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote

from ..errors import UnsafeTarget
from .targets import check_host, split_url

DEFAULT_PORT = 5672
_QUERY_KEYS = ("exchange", "routing_key", "mode")
#: The content modes a sender can publish in: structured (the default) or binary.
MODES = ("structured", "binary")
# AMQP 0-9-1 short strings (exchange, routing key, vhost) are at most 255 bytes.
_MAX_SHORT = 255


@dataclass(frozen=True)
class AmqpTarget:
    host: str
    port: int
    vhost: str
    user: str
    password: str = field(repr=False)
    exchange: str
    #: None: each event's type is its routing key.
    routing_key: str | None
    #: Binary content mode: the body is the event's data, its attributes headers.
    binary: bool = False

    @property
    def shown(self) -> str:
        """The URL as it may appear in messages and logs: the password replaced."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"exchange={self.exchange}"
        if self.routing_key is not None:
            query += f"&routing_key={self.routing_key}"
        if self.binary:
            query += "&mode=binary"
        vhost = "%2F" if self.vhost == "/" else self.vhost
        return f"amqp://{self.user}:***@{host}:{self.port}/{vhost}?{query}"


def check_amqp_target(url: object, allowed_hosts: Iterable[str] | None = None) -> AmqpTarget:
    """Parse ``url`` or raise :class:`UnsafeTarget` naming what is wrong (never the password);
    makes no connection and no DNS query."""
    extra = tuple(allowed_hosts or ())
    for name in extra:
        if not isinstance(name, str) or not name:
            raise TypeError(f"allowed_hosts: every host must be a non-empty string, got {name!r}")
    parts, port = split_url(url)
    if parts.scheme != "amqp":
        raise UnsafeTarget(f"url: only amqp:// is allowed here, got {parts.scheme or 'none'!r}")
    host = check_host((parts.hostname or "").lower(), extra)
    if port == 0:
        raise UnsafeTarget("url: port 0 is not a port a broker can listen on")
    if parts.fragment:
        raise UnsafeTarget("url: a fragment is not allowed")
    query = _query(parts.query)
    exchange = query.get("exchange")
    if exchange is None:
        raise UnsafeTarget(
            "url: the exchange parameter is missing (amqp://USER:PASS@HOST:PORT/VHOST"
            "?exchange=E[&routing_key=K]); the default exchange is not used"
        )
    routing_key = query.get("routing_key")
    # An empty path is the default vhost "/"; "/%2F" names it explicitly.
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    for name, value in (("exchange", exchange), ("routing_key", routing_key), ("vhost", vhost)):
        if value is not None and len(value.encode()) > _MAX_SHORT:
            raise UnsafeTarget(f"url: {name} is longer than {_MAX_SHORT} bytes")
    return AmqpTarget(
        host=host,
        port=port if port is not None else DEFAULT_PORT,
        vhost=vhost,
        user=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        exchange=exchange,
        routing_key=routing_key,
        binary=content_mode(query) == "binary",
    )


def content_mode(query: dict[str, str]) -> str:
    """The ``mode`` query parameter of a broker target: structured (the default) or binary."""
    mode = query.get("mode", "structured")
    if mode not in MODES:
        raise UnsafeTarget(f"url: mode must be structured or binary, got {mode!r}")
    return mode


def _query(text: str) -> dict[str, str]:
    try:
        pairs = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError:
        raise UnsafeTarget(
            "url: the query cannot be parsed (use exchange=E&routing_key=K)"
        ) from None
    unknown = sorted(set(pairs) - set(_QUERY_KEYS))
    if unknown:
        raise UnsafeTarget(
            f"url: unknown query parameter {unknown[0]!r} (known: exchange, routing_key, mode)"
        )
    found: dict[str, str] = {}
    for name, values in pairs.items():
        if len(values) != 1:
            raise UnsafeTarget(f"url: {name} is given {len(values)} times")
        if name == "exchange" and not values[0]:
            raise UnsafeTarget("url: exchange must not be empty (no default exchange)")
        if name == "routing_key" and not values[0]:
            raise UnsafeTarget(
                "url: routing_key must not be empty (leave it out: the event's type)"
            )
        found[name] = values[0]
    return found
