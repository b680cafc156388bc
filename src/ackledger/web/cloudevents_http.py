"""The CloudEvents HTTP binding, the receiving side: a request's headers and body to the event
(or events) it carries, for ``envelope.validate_cloudevent`` to judge.

Three content modes, told apart by ``Content-Type`` alone (CloudEvents HTTP binding, 3):

- structured: ``application/cloudevents+json``, the body is the event in the JSON format;
- binary: ``application/json``, the body is the event's ``data`` and every other attribute
  is a ``ce-<name>`` header, its value percent-encoded (3.1.3.2);
- batch: ``application/cloudevents-batch+json``, the body is a JSON list of events.

Only the form is checked here (content type, headers given once, strict JSON); whether the
result is a valid event is the envelope's to say. The plain ``traceparent``/``tracestate``
headers are not read: they are the HTTP hop's trace context, which a sender sets for its own
request, while the event's own (the distributed-tracing extension) travels as
``ce-traceparent``/``ce-tracestate`` in binary mode, as the SDKs send it.

Pure: no server, no I/O; ``headers`` are ASGI's (lowercase names, bytes).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .._core.strict_json import parse_strict_json
from ..errors import InvalidEvent

__all__ = [
    "BATCH",
    "BINARY",
    "STRUCTURED",
    "content_mode",
    "decode_batch",
    "decode_event",
    "structured_content_type",
]

STRUCTURED = "structured"
BINARY = "binary"
BATCH = "batch"

Headers = Sequence[tuple[bytes, bytes]]

_MEDIA_MODES = {
    "application/cloudevents+json": STRUCTURED,
    "application/json": BINARY,
    "application/cloudevents-batch+json": BATCH,
}
#: What senders put there, as they put it: found with one dict look-up, before any parsing.
_EXACT = {
    **{media.encode(): mode for media, mode in _MEDIA_MODES.items()},
    **{f"{media}; charset=utf-8".encode(): mode for media, mode in _MEDIA_MODES.items()},
    **{f"{media}; charset=UTF-8".encode(): mode for media, mode in _MEDIA_MODES.items()},
}
_CE = b"ce-"
#: Attributes a ``ce-`` header may not carry: binary mode's data is the body, and its media
#: type the Content-Type header ("a ce-datacontenttype header MUST NOT also be present").
_NOT_HEADERS = {"data": "the body", "data_base64": "the body", "datacontenttype": "Content-Type"}
_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")


def content_mode(content_type: bytes | None) -> str:
    """``STRUCTURED``, ``BINARY`` or ``BATCH`` for a Content-Type header's value, or
    InvalidEvent naming ``content-type`` for any other (or a charset other than UTF-8)."""
    if content_type is not None:
        mode = _EXACT.get(content_type)
        if mode is not None:
            return mode
    return _parsed_mode(content_type)


def structured_content_type(value: bytes | str | None) -> bool:
    """Is this Content-Type one event in the structured JSON format? (Never raises.)"""
    raw = value.encode("latin-1", "replace") if isinstance(value, str) else value
    try:
        return content_mode(raw) == STRUCTURED
    except InvalidEvent:
        return False


def decode_event(headers: Headers, body: bytes) -> object:
    """The one event a ``POST /events`` request carries, structured or binary: a JSON object
    from the body, or the attributes of the ``ce-`` headers with the body as ``data``."""
    content_type = _content_type(headers)
    if content_type is None:
        mode = _parsed_mode(None, binary_without_data=_has_ce_headers(headers))
    else:
        mode = _EXACT.get(content_type) or _parsed_mode(content_type)
    if mode == STRUCTURED:
        event = _json(body)
        if type(event) is not dict:
            raise InvalidEvent(
                f"body: a structured-mode event must be a JSON object, got {_kind(event)}",
                field="body",
            )
        return event
    if mode == BINARY:
        if not _has_ce_headers(headers):
            # Most often a structured event sent as plain JSON: say that, not "specversion".
            raise InvalidEvent(
                "content-type: application/json is binary mode, whose attributes travel as "
                "ce-* headers, and this request has none; send a structured event as "
                "application/cloudevents+json",
                field="content-type",
            )
        return _binary(headers, body, content_type is not None)
    raise InvalidEvent(
        "content-type: application/cloudevents-batch+json is a batch; "
        "send it to the batch route, or one event as application/cloudevents+json",
        field="content-type",
    )


def decode_batch(headers: Headers, body: bytes) -> list[object]:
    """The events of a batch request (``application/cloudevents-batch+json``): the body's
    JSON list, each item as it is (the caller checks their number and each event)."""
    content_type = _content_type(headers)
    if content_mode(content_type) != BATCH:
        raise InvalidEvent(
            "content-type: a batch must be application/cloudevents-batch+json, "
            f"got {_shown(content_type)}",
            field="content-type",
        )
    events = _json(body)
    if type(events) is not list:
        raise InvalidEvent(
            f"body: a batch must be a JSON list of events, got {_kind(events)}", field="body"
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


def _has_ce_headers(headers: Headers) -> bool:
    return any(name.startswith(_CE) for name, _ in headers)


def _parsed_mode(content_type: bytes | None, *, binary_without_data: bool = False) -> str:
    if content_type is None:
        # A binary-mode event without data has no Content-Type (there is no data to type);
        # _binary then refuses a body. Anything else must say what its body is.
        if binary_without_data:
            return BINARY
        raise InvalidEvent(
            "content-type: missing; send application/cloudevents+json", field="content-type"
        )
    text = content_type.decode("latin-1")
    media, *parameters = text.split(";")
    mode = _MEDIA_MODES.get(media.strip().lower())
    if mode is None:
        raise InvalidEvent(
            "content-type: must be application/cloudevents+json, application/json with ce- "
            f"headers, or application/cloudevents-batch+json; got {text!r}",
            field="content-type",
        )
    for parameter in parameters:
        name, equals, value = parameter.partition("=")
        if not equals or not name.strip():
            raise InvalidEvent(
                f"content-type: malformed parameter {parameter.strip()!r}", field="content-type"
            )
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset != "utf-8":
            # JSON on the wire is UTF-8 (RFC 8259); anything else would be read wrong.
            raise InvalidEvent(
                f"content-type: charset must be utf-8, got {value.strip()!r}",
                field="content-type",
            )
    return mode


def _binary(headers: Headers, body: bytes, typed: bool) -> dict[str, Any]:
    event: dict[str, Any] = {}
    for name, raw in headers:
        if not name.startswith(_CE):
            continue
        attribute = name[3:].decode("latin-1")
        if attribute in _NOT_HEADERS:
            raise InvalidEvent(
                f"ce-{attribute}: not a header in binary mode "
                f"({_NOT_HEADERS[attribute]} carries it)",
                field=attribute,
            )
        if attribute in event:
            raise InvalidEvent(f"ce-{attribute}: header given twice", field=attribute)
        event[attribute] = _header_value(raw, attribute)
    if typed:
        event["datacontenttype"] = "application/json"
        if body:
            event["data"] = _json(body)
    elif body:
        raise InvalidEvent(
            "content-type: missing; a binary-mode body must be application/json",
            field="content-type",
        )
    return event


def _header_value(raw: bytes, attribute: str) -> str:
    """A ``ce-`` header's value as the attribute's string: quoted strings unescaped, then one
    round of percent-decoding, and the bytes read as strict UTF-8 (binding 3.1.3.2)."""
    value = raw.strip(b" \t")
    if b'"' in value:
        value = _unquoted(value, attribute)
    if b"%" in value:
        value = _percent_decoded(value, attribute)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        # Strict UTF-8 also refuses overlong forms such as %C0%A0, as the binding requires.
        raise InvalidEvent(
            f"ce-{attribute}: its percent-decoded value is not UTF-8", field=attribute
        ) from None


def _unquoted(value: bytes, attribute: str) -> bytes:
    """RFC 9110 quoted strings (older senders' form) to their content; text outside stays."""
    out = bytearray()
    quoted = escaped = False
    for byte in value:
        if escaped:
            out.append(byte)
            escaped = False
        elif quoted and byte == 0x5C:  # backslash: the next byte stands for itself
            escaped = True
        elif byte == 0x22:  # double quote
            quoted = not quoted
        else:
            out.append(byte)
    if quoted or escaped:
        raise InvalidEvent(f"ce-{attribute}: an unterminated quoted string", field=attribute)
    return bytes(out)


def _percent_decoded(value: bytes, attribute: str) -> bytes:
    if value.count(b"%") != len(_PERCENT.findall(value)):
        raise InvalidEvent(
            f"ce-{attribute}: a '%' not followed by two hexadecimal digits", field=attribute
        )
    return _PERCENT.sub(lambda match: bytes((int(match.group(1), 16),)), value)


def _json(body: bytes) -> Any:
    try:
        # UTF-8 only (RFC 8259): json.loads(bytes) would also guess UTF-16/32 and skip a BOM.
        # ``decode()`` is strict UTF-8 without naming it (a named codec is looked up per call).
        return parse_strict_json(body.decode())
    except UnicodeDecodeError as exc:
        raise InvalidEvent(
            f"body: not UTF-8 ({exc.reason} at byte {exc.start})", field="body"
        ) from None
    except RecursionError:
        raise InvalidEvent("body: JSON nested too deeply", field="body") from None
    except ValueError as exc:
        raise InvalidEvent(f"body: not valid JSON ({exc})", field="body") from None


def _kind(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, int | float) else "null"
    )


def _shown(content_type: bytes | None) -> str:
    return "none" if content_type is None else repr(content_type.decode("latin-1"))
