"""The one reader of a CloudEvents message, whatever carried it: an HTTP request, a RabbitMQ
message, a NATS message. Its media type, its attribute headers and its body become the event
(or events) it holds, for ``validate_cloudevent`` to judge.

The content modes of the protocol bindings, told apart by the media type and the headers:

- structured: ``application/cloudevents+json``, the body is the event in the JSON format;
- batch: ``application/cloudevents-batch+json``, the body is a JSON list of events;
- binary: any other media type (or none) with attribute headers: every attribute is a header,
  the body is the event's ``data`` and its media type the ``datacontenttype``, kept as sent.

A binary body without a media type is read as JSON; a JSON media type's body as JSON; a text
one (``text/*``, XML, or one naming a charset) as a string; any other as bytes
(``data_base64``). Another structured or batch format (``application/cloudevents+avro``), a
charset that is not UTF-8 for JSON, or a media type with no attribute headers is
``UnsupportedMedia`` (HTTP's 415). Only the form is checked here; whether the result is a valid
event is the envelope's to say. Pure: no I/O.
"""

from __future__ import annotations

import base64
import codecs
import datetime
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .._core.canonical import canonical_json
from .._core.strict_json import parse_strict_json
from ..errors import InvalidEvent
from .media_type import essence, is_json_media_type, is_media_type, parameter

__all__ = [
    "BATCH",
    "BINARY",
    "STRUCTURED",
    "STRUCTURED_MEDIA",
    "UnsupportedMedia",
    "attribute_headers",
    "binary_body",
    "content_mode",
    "decode_broker_message",
    "decode_message",
    "json_body",
    "json_kind",
]

STRUCTURED = "structured"
BINARY = "binary"
BATCH = "batch"

STRUCTURED_MEDIA = "application/cloudevents+json"
_BATCH_MEDIA = "application/cloudevents-batch+json"
#: Attributes a header may not carry in binary mode: its data is the body, and its media type
#: the content type ("a ce-datacontenttype header MUST NOT also be present").
_NOT_HEADERS = {
    "data": "the body",
    "data_base64": "the body",
    "datacontenttype": "the content type",
}
_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")

#: The header prefixes of the bindings: ``ce-`` (HTTP, NATS, and HTTP-style RabbitMQ
#: publishers; values percent-encoded) and the AMQP binding's ``cloudEvents_`` and
#: ``cloudEvents:`` (values typed by the protocol, not encoded).
CE_PREFIXES = ("ce-",)
AMQP_PREFIXES = ("ce-", "cloudevents_", "cloudevents:")


class UnsupportedMedia(InvalidEvent):
    """A media type this reader does not take (another event format, a charset other than
    UTF-8 for JSON, a body that is no CloudEvent): HTTP's 415."""

    status = 415

    def __init__(self, message: str) -> None:
        super().__init__(f"content-type: {message}", field="content-type")


@functools.lru_cache(maxsize=256)
def content_mode(content_type: str | None, has_attributes: bool) -> str:
    """``STRUCTURED``, ``BATCH`` or ``BINARY`` for a message of this media type (None: it has
    none), or InvalidEvent (malformed) / UnsupportedMedia (not one of these) naming it.
    Senders repeat their few media types: each answer is remembered (refusals are not)."""
    if content_type is None:
        if has_attributes:
            return BINARY
        raise InvalidEvent(
            "content-type: missing; send application/cloudevents+json, or the attributes as "
            "ce- headers (binary mode)",
            field="content-type",
        )
    media = essence(content_type)
    if not is_media_type(media):
        raise InvalidEvent(
            f"content-type: {content_type!r} is not a media type", field="content-type"
        )
    _check_parameters(content_type)
    if media in (STRUCTURED_MEDIA, _BATCH_MEDIA):
        _utf8_only(content_type)
        return STRUCTURED if media == STRUCTURED_MEDIA else BATCH
    if media.startswith("application/cloudevents"):
        raise UnsupportedMedia(
            f"{media} is an event format this receiver does not read; send "
            "application/cloudevents+json (or application/cloudevents-batch+json)"
        )
    if not has_attributes:
        raise UnsupportedMedia(
            f"{media} with no ce- headers is no CloudEvent; send a structured event as "
            "application/cloudevents+json, or its attributes as ce- headers (binary mode)"
        )
    if is_json_media_type(content_type):
        _utf8_only(content_type)
    return BINARY


#: An attribute header found: the attribute's name, its raw value, and the header's name.
Attribute = tuple[str, object, str]


def decode_message(
    content_type: str | None, attributes: Iterable[Attribute], body: bytes
) -> dict[str, Any]:
    """The one event a message carries, structured or binary. ``attributes``: the message's
    attribute headers already read (``attribute_headers``)."""
    pairs = list(attributes)
    mode = content_mode(content_type, bool(pairs))
    if mode == STRUCTURED:
        event = json_body(body)
        if type(event) is not dict:
            raise InvalidEvent(
                f"body: a structured-mode event must be a JSON object, got {json_kind(event)}",
                field="body",
            )
        return event
    if mode == BATCH:
        raise UnsupportedMedia(
            "application/cloudevents-batch+json is a batch; "
            "send it to the batch route, or one event as application/cloudevents+json"
        )
    return _binary(content_type, pairs, body)


#: What binary mode never sends as an attribute header: the body carries the data, the
#: content type its media type.
NOT_BINARY_HEADERS = frozenset({"data", "data_base64", "datacontenttype"})


def binary_body(event: Mapping[str, Any]) -> tuple[str | None, bytes]:
    """A valid event's binary-mode content type and body, what ``decode_message`` reads
    back: JSON data as JSON (``application/json`` when no media type is declared), text in
    its charset, ``data_base64`` as its bytes; no data, an empty body."""
    declared: str | None = event.get("datacontenttype")
    if "data_base64" in event:
        return declared, base64.b64decode(event["data_base64"])
    if "data" not in event:
        return declared, b""
    if declared is None or is_json_media_type(declared):
        return declared or "application/json", canonical_json(event["data"]).encode()
    charset = parameter(declared, "charset") or "utf-8"
    try:
        return declared, str(event["data"]).encode(charset)
    except (LookupError, UnicodeEncodeError):
        raise InvalidEvent(
            f"data: cannot be sent as {declared} in binary mode (its charset cannot hold it)",
            field="data",
        ) from None


def decode_broker_message(
    content_type: str | None,
    headers: Mapping[str, object] | None,
    body: bytes,
    prefixes: tuple[str, ...] = AMQP_PREFIXES,
) -> dict[str, Any]:
    """The one event of a broker's message: its content type (AMQP's property; else a
    ``content-type`` header, as NATS carries it), its headers and its body."""
    pairs = list((headers or {}).items())
    if content_type is None:
        content_type = next(
            (str(value) for name, value in pairs if name.lower() == "content-type"), None
        )
    attributes = attribute_headers(pairs, prefixes)
    if not attributes and (content_type is None or essence(content_type) == "application/json"):
        # JSON with no attribute headers: the JSON format's event, as publishers of
        # structured mode have long sent it without naming the format.
        content_type = STRUCTURED_MEDIA
    return decode_message(content_type, attributes, body)


def attribute_headers(
    headers: Iterable[tuple[str | bytes, object]], prefixes: tuple[str, ...] = CE_PREFIXES
) -> list[Attribute]:
    """The attribute headers among a message's headers, as ``(name, raw value, header)``:
    the name without its prefix (case is not kept: attribute names are lowercase). Values
    are decoded only in binary mode, where they are the attributes."""
    found: list[Attribute] = []
    for raw_name, raw in headers:
        name = raw_name.decode("latin-1") if isinstance(raw_name, bytes) else raw_name
        lowered = name.lower()
        for prefix in prefixes:
            if lowered.startswith(prefix):
                attribute = lowered[len(prefix) :]
                found.append((attribute, raw, name))
                break
    return found


def json_body(body: bytes) -> Any:
    """The body as strict JSON (UTF-8 only, as RFC 8259 says), or InvalidEvent naming it."""
    try:
        # json.loads(bytes) would also guess UTF-16/32 and skip a BOM. ``decode()`` is strict
        # UTF-8 without naming it (a named codec is looked up per call).
        return parse_strict_json(body.decode())
    except UnicodeDecodeError as exc:
        raise InvalidEvent(
            f"body: not UTF-8 ({exc.reason} at byte {exc.start})", field="body"
        ) from None
    except RecursionError:
        raise InvalidEvent("body: JSON nested too deeply", field="body") from None
    except ValueError as exc:
        raise InvalidEvent(f"body: not valid JSON ({exc})", field="body") from None


def _binary(content_type: str | None, pairs: list[Attribute], body: bytes) -> dict[str, Any]:
    event: dict[str, Any] = {}
    for attribute, raw, header in pairs:
        if attribute in _NOT_HEADERS:
            raise InvalidEvent(
                f"{header.lower()}: not a header in binary mode "
                f"({_NOT_HEADERS[attribute]} carries it)",
                field=attribute,
            )
        if attribute in event:
            raise InvalidEvent(f"{header.lower()}: header given twice", field=attribute)
        if header[:3].lower() == "ce-":
            event[attribute] = _text_value(raw, attribute)
        else:
            event[attribute] = _typed_value(raw, header, attribute)
    if content_type is None:
        if body:
            event["data"] = json_body(body)  # the binding's default: JSON
        return event
    event["datacontenttype"] = content_type.strip()
    if not body:
        return event
    if is_json_media_type(content_type):
        event["data"] = json_body(body)
    elif _is_text(content_type):
        event["data"] = _text(body, content_type)
    else:
        event["data_base64"] = base64.b64encode(body).decode("ascii")
    return event


def _is_text(content_type: str) -> bool:
    media = essence(content_type)
    return (
        media.startswith("text/")
        or media.endswith(("/xml", "+xml"))
        or parameter(content_type, "charset") is not None
    )


def _text(body: bytes, content_type: str) -> str:
    charset = parameter(content_type, "charset") or "utf-8"
    try:
        codec = codecs.lookup(charset)
    except LookupError:
        raise UnsupportedMedia(f"charset {charset!r} is not one this receiver knows") from None
    try:
        return codec.decode(body)[0]
    except UnicodeDecodeError as exc:
        raise InvalidEvent(
            f"body: not {charset} ({exc.reason} at byte {exc.start})", field="body"
        ) from None


def _check_parameters(content_type: str) -> None:
    for part in content_type.split(";")[1:]:
        name, equals, _ = part.partition("=")
        if not equals or not name.strip():
            raise InvalidEvent(
                f"content-type: malformed parameter {part.strip()!r}", field="content-type"
            )


def _utf8_only(content_type: str) -> None:
    charset = parameter(content_type, "charset")
    if charset is not None and charset.lower() != "utf-8":
        # JSON on the wire is UTF-8 (RFC 8259); anything else would be read wrong.
        raise UnsupportedMedia(f"charset must be utf-8, got {charset!r}")


def _text_value(raw: object, attribute: str) -> str:
    """A ``ce-`` header's value as the attribute's string: quoted strings unescaped, then one
    round of percent-decoding, and the bytes read as strict UTF-8 (HTTP binding 3.1.3.2)."""
    value = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
    value = value.strip(b" \t")
    if b'"' in value:
        value = _unquoted(value, attribute)
    if b"%" in value:
        if value.count(b"%") != len(_PERCENT.findall(value)):
            raise InvalidEvent(
                f"ce-{attribute}: a '%' not followed by two hexadecimal digits", field=attribute
            )
        value = _PERCENT.sub(lambda match: bytes((int(match.group(1), 16),)), value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        # Strict UTF-8 also refuses overlong forms such as %C0%A0, as the binding requires.
        raise InvalidEvent(
            f"ce-{attribute}: its percent-decoded value is not UTF-8", field=attribute
        ) from None


def _typed_value(raw: object, header: str, attribute: str) -> object:
    """An AMQP application property's value: strings, booleans and integers as they are (the
    envelope judges them), bytes as UTF-8, a timestamp as RFC 3339."""
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidEvent(f"{header}: its value is not UTF-8", field=attribute) from None
    if isinstance(raw, datetime.datetime):
        return _rfc3339(raw)
    if attribute == "time" and isinstance(raw, int) and not isinstance(raw, bool):
        # The AMQP binding's timestamp: milliseconds since the epoch.
        try:
            moment = datetime.datetime.fromtimestamp(raw / 1000, datetime.UTC)
        except (OverflowError, OSError, ValueError):
            raise InvalidEvent(f"{header}: not a timestamp", field=attribute) from None
        return _rfc3339(moment)
    return raw


def _rfc3339(moment: datetime.datetime) -> str:
    moment = moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)
    return moment.isoformat().replace("+00:00", "Z")


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


def json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words (for messages)."""
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, int | float) else "null"
    )
