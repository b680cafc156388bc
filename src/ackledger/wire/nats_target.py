"""Where a ``nats://`` URL sends an event, and what the message carries.

``nats://[USER:PASS@]HOST:PORT?subject=PREFIX[&stream=S][&mode=binary]`` is checked before
any connection or name look-up (loopback, or a host given explicitly); the password is kept
apart from the URL that is shown. An event goes to ``PREFIX.<type>``, its CloudEvents
attributes as ``ce-`` headers (percent-encoded as the HTTP binding says) and
``Nats-Msg-Id = "<source> <id>"`` (JetStream's duplicate window drops a re-send); the body
is the structured event, or in binary mode its data, with its media type as ``content-type``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from ..envelope.message import NOT_BINARY_HEADERS
from ..errors import InvalidEvent, UnsafeTarget
from .amqp_target import content_mode
from .targets import check_host, split_url

DEFAULT_PORT = 4222
STRUCTURED = "application/cloudevents+json"

# A subject prefix: dot-separated tokens without wildcards or whitespace. A stream name: no
# whitespace, dots, wildcards or path separators (the server's own rules for a name).
_TOKEN = re.compile(r"[!-~]+")
_STREAM = re.compile(r"[!-~]{1,255}")
_NOT_IN_STREAM_NAME = frozenset(".*>/\\")
# Header values: printable ASCII but space, '%' and '"', as the CloudEvents HTTP binding keeps
# them; everything else is percent-encoded (a CR or LF would end the header block).
_HEADER_SAFE = frozenset(chr(c) for c in range(0x21, 0x7F)) - {"%", '"'}
# The dedup id keeps its space: it is no attribute, and a re-send must carry the same id.
_MSG_ID_SAFE = _HEADER_SAFE | {" "}


@dataclass(frozen=True)
class NatsTarget:
    host: str
    port: int
    prefix: str
    stream: str | None
    # Never shown: repr and messages name the host only.
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    #: Binary content mode: the body is the event's data, its attributes headers.
    binary: bool = False

    @property
    def server(self) -> str:
        """The server URL handed to nats-py, without credentials (they go separately)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"nats://{host}:{self.port}"


def _refuse(message: str) -> UnsafeTarget:
    return UnsafeTarget(f"url: {message}")


def check_nats_target(url: object, allowed_hosts: Iterable[str] | None = None) -> NatsTarget:
    """Parse a ``nats://`` URL or raise :class:`UnsafeTarget`; no connection, no DNS query."""
    parts, port = split_url(url, "nats://HOST:PORT?subject=PREFIX")
    if parts.scheme.lower() != "nats":
        raise _refuse(f"only nats:// is allowed here, got {parts.scheme or 'none'!r}")
    host = check_host((parts.hostname or "").lower(), _hosts(allowed_hosts))
    if port == 0:
        raise _refuse("port 0 is not a port a server can listen on")
    if parts.path not in ("", "/"):
        raise _refuse(f"a nats:// URL has no path, got {parts.path!r}")
    if parts.fragment:
        raise _refuse("a fragment is not allowed")
    prefix, stream, binary = _query(parts.query)
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return NatsTarget(host, port or DEFAULT_PORT, prefix, stream, user, password, binary)


def _hosts(allowed_hosts: Iterable[str] | None) -> tuple[str, ...]:
    hosts = tuple(allowed_hosts or ())
    for extra in hosts:
        if not isinstance(extra, str) or not extra:
            raise TypeError(f"allowed_hosts: every host must be a non-empty string, got {extra!r}")
    return hosts


def _query(query: str) -> tuple[str, str | None, bool]:
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _refuse("the query cannot be parsed; give ?subject=PREFIX[&stream=S]") from None
    unknown = sorted(set(fields) - {"subject", "stream", "mode"})
    if unknown:
        raise _refuse(f"unknown query parameter {unknown[0]!r} (only subject, stream and mode)")
    for name, values in fields.items():
        if len(values) > 1:
            raise _refuse(f"{name} is given {len(values)} times")
    if "subject" not in fields:
        raise _refuse("subject is missing: give ?subject=PREFIX (events go to PREFIX.<type>)")
    prefix = fields["subject"][0]
    tokens = prefix.split(".")
    if not all(_TOKEN.fullmatch(t) and t not in ("*", ">") for t in tokens):
        raise _refuse(
            f"subject {prefix!r} is not a subject prefix (dot-separated tokens of printable"
            " characters, no wildcards)"
        )
    stream = fields["stream"][0] if "stream" in fields else None
    if stream is not None and (
        not _STREAM.fullmatch(stream) or _NOT_IN_STREAM_NAME.intersection(stream)
    ):
        raise _refuse(
            f"stream {stream!r} is not a stream name (1-255 printable characters, no . * > / \\)"
        )
    mode = content_mode({name: values[0] for name, values in fields.items()})
    return prefix, stream, mode == "binary"


def subject_of(prefix: str, event: Mapping[str, Any]) -> str:
    """``PREFIX.<type>``; a type with an empty token (``a..b``, ``a.``) makes no subject."""
    kind = event["type"]
    if "" in kind.split("."):
        raise InvalidEvent(f"type: {kind!r} makes no NATS subject (an empty token)", field="type")
    return f"{prefix}.{kind}"


def _header_value(value: object, safe: frozenset[str] = _HEADER_SAFE) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    else:
        text = str(value)
    if all(ch in safe for ch in text):
        return text
    return "".join(
        ch if ch in safe else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in text
    )


#: The names of a given event that are not ``ce-`` headers; a stored one has the outbox's
#: ``seq`` besides (``wire/stored.py``).
GIVEN_SKIP = frozenset({"data", "data_base64"})
STORED_SKIP = frozenset({"data", "data_base64", "seq"})


def headers_of(
    event: Mapping[str, Any],
    stream: str | None = None,
    skip: frozenset[str] = GIVEN_SKIP,
    content_type: str | None = STRUCTURED,
) -> dict[str, str]:
    """The message headers: the dedup id, the content type (binary mode: the data's, if
    any), and every attribute as ``ce-``."""
    headers = {"Nats-Msg-Id": _header_value(f"{event['source']} {event['id']}", _MSG_ID_SAFE)}
    if content_type is not None:
        headers["content-type"] = content_type
    if content_type != STRUCTURED:
        skip = skip | NOT_BINARY_HEADERS
    for name, value in event.items():
        if name not in skip:
            headers[f"ce-{name}"] = _header_value(value)
    # The W3C header names too, so a consumer's tracing finds them where it looks.
    for name in ("traceparent", "tracestate"):
        if name in event:
            headers[name] = _header_value(event[name])
    if stream is not None:
        # The server itself refuses the message if the subject is another stream's.
        headers["Nats-Expected-Stream"] = stream
    return headers
