"""The CloudEvents HTTP binding, the receiving side: a request's headers and body to the event
(or events) it carries, through the one message reader (``envelope.message``).

Structured mode (``application/cloudevents+json``), binary mode (``ce-`` headers, any media
type or none, ``datacontenttype`` kept as sent) and batches
(``application/cloudevents-batch+json``). The plain ``traceparent``/``tracestate`` headers are
not read: they are the HTTP hop's trace context, which a sender sets for its own request,
while the event's own (the distributed-tracing extension) travels as
``ce-traceparent``/``ce-tracestate`` in binary mode, as the SDKs send it.

Pure: no server, no I/O; ``headers`` are ASGI's (lowercase names, bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..envelope.message import (
    BATCH,
    BINARY,
    STRUCTURED,
    UnsupportedMedia,
    attribute_headers,
    decode_message,
    json_body,
    json_kind,
)
from ..envelope.message import content_mode as _mode_of
from ..errors import InvalidEvent

__all__ = [
    "BATCH",
    "BINARY",
    "STRUCTURED",
    "UnsupportedMedia",
    "content_mode",
    "decode_batch",
    "decode_event",
    "structured_content_type",
]

Headers = Sequence[tuple[bytes, bytes]]

#: What senders put there, as they put it: a structured event found with one dict look-up,
#: before any parsing (the sink's hot path).
_STRUCTURED_EXACT = frozenset(
    {
        b"application/cloudevents+json",
        b"application/cloudevents+json; charset=utf-8",
        b"application/cloudevents+json; charset=UTF-8",
    }
)


def content_mode(content_type: bytes | None, has_attributes: bool = True) -> str:
    """``STRUCTURED``, ``BINARY`` or ``BATCH`` for a Content-Type header's value, or
    InvalidEvent naming ``content-type`` (UnsupportedMedia: 415) for any other."""
    return _mode_of(_text(content_type), has_attributes)


def structured_content_type(value: bytes | str | None) -> bool:
    """Is this Content-Type one event in the structured JSON format? (Never raises.)"""
    raw = value.encode("latin-1", "replace") if isinstance(value, str) else value
    try:
        return raw is not None and content_mode(raw, False) == STRUCTURED
    except InvalidEvent:
        return False


def decode_event(headers: Headers, body: bytes) -> object:
    """The one event a ``POST /events`` request carries, structured or binary: a JSON object
    from the body, or the attributes of the ``ce-`` headers with the body as ``data``."""
    content_type = _content_type(headers)
    if content_type in _STRUCTURED_EXACT:
        event = json_body(body)
        if type(event) is dict:
            return event
    return decode_message(_text(content_type), attribute_headers(headers), body)


def decode_batch(headers: Headers, body: bytes) -> list[object]:
    """The events of a batch request (``application/cloudevents-batch+json``): the body's
    JSON list, each item as it is (the caller checks their number and each event)."""
    content_type = _content_type(headers)
    if content_type is None or content_mode(content_type) != BATCH:
        raise UnsupportedMedia(
            f"a batch must be application/cloudevents-batch+json, got {_shown(content_type)}"
        )
    events = json_body(body)
    if type(events) is not list:
        raise InvalidEvent(
            f"body: a batch must be a JSON list of events, got {json_kind(events)}", field="body"
        )
    return events


def _content_type(headers: Headers) -> bytes | None:
    found: bytes | None = None
    for name, value in headers:
        if name == b"content-type":
            if found is not None:
                # Two Content-Types would let two readers of one request see two modes.
                raise InvalidEvent("content-type: given twice", field="content-type")
            found = value
    return found


def _text(content_type: bytes | None) -> str | None:
    return None if content_type is None else content_type.decode("latin-1")


def _shown(content_type: bytes | None) -> str:
    return "none" if content_type is None else repr(content_type.decode("latin-1"))
