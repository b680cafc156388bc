"""The rules of a CloudEvents 1.0 event (CONTRACT sections 1 and 13), checked one attribute
at a time.

The first broken rule raises InvalidEvent naming its attribute, in this order: the required
attributes, then ``datacontenttype`` and ``data`` (so a type's schema speaks before the
attributes often derived from the data), the other known attributes, the extensions by
name, and last the size of the whole.
"""

from __future__ import annotations

import binascii
import functools
import re
from collections.abc import Mapping
from typing import Any

from .._core.canonical import canonical_json
from .._core.printable import CONTROL, is_printable
from ..errors import InvalidEvent
from ..event_types import MAX_NAME, EventTypes, check_type_name
from .content import MAX_EVENT_BYTES
from .fast import fast_encoded
from .json_value import check_text, copy_json, shown_name
from .media_type import is_json_media_type, is_media_type
from .timestamp import is_rfc3339
from .trace_context import is_traceparent, is_tracestate
from .uri_reference import is_absolute_uri, is_uri_reference

_KNOWN = frozenset(
    {
        "specversion",
        "id",
        "source",
        "type",
        "datacontenttype",
        "dataschema",
        "data",
        "data_base64",
        "subject",
        "time",
        "partitionkey",
        "traceparent",
        "tracestate",
    }
)
_EXTENSION_NAME = re.compile(r"[a-z0-9]+")
#: CloudEvents' Integer type: a signed 32-bit number.
_INT32 = range(-(2**31), 2**31)
#: Strict base64 (RFC 4648, padded), the JSON format's ``data_base64``.
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
#: A text of at most this many characters is within MAX_EVENT_BYTES whatever they are (UTF-8
#: takes at most 4 bytes a character), so its bytes need not be counted.
_SURELY_SMALL = MAX_EVENT_BYTES // 4


def validate_cloudevent(obj: object, *, types: EventTypes | None = None) -> dict[str, Any]:
    """Return a new, validated event (nested values copied too) or raise InvalidEvent.

    ``types`` gives the schemas to run on ``data``; without it only the reference type's.
    A member whose value is null is treated as absent, as the CloudEvents JSON format says.
    """
    return validate_encoded(obj, types=types)[0]


def validate_encoded(obj: object, *, types: EventTypes | None = None) -> tuple[dict[str, Any], str]:
    """``validate_cloudevent`` and the event's canonical JSON, which the size rule needs
    anyway: the callers that store, send or fingerprint the event reuse it."""
    kinds = types if types is not None else _reference_types()
    if type(obj) is dict:
        found = fast_encoded(obj, kinds)
        if found is not None:
            text = found[1]
            if len(text) <= _SURELY_SMALL or len(text.encode()) <= MAX_EVENT_BYTES:
                return found
    return _validate_fully(obj, kinds)


def _validate_fully(obj: object, types: EventTypes) -> tuple[dict[str, Any], str]:
    given = _attributes(obj)
    event: dict[str, Any] = {}
    for name in ("specversion", "id", "source", "type"):
        if name not in given:
            raise InvalidEvent(f"{name}: missing", field=name)
    if _string(given["specversion"], "specversion") != "1.0":
        raise InvalidEvent('specversion: must be "1.0"', field="specversion")
    event["specversion"] = "1.0"
    event["id"] = _printable(given["id"], "id")
    event["source"] = _source(given["source"])
    event["type"] = check_type_name(_string(given["type"], "type"))
    if "datacontenttype" in given:
        declared = _string(given["datacontenttype"], "datacontenttype")
        if not is_media_type(declared):
            raise InvalidEvent(
                "datacontenttype: must be a media type (RFC 2046), such as application/json",
                field="datacontenttype",
            )
        event["datacontenttype"] = declared
    _data(given, event, types)
    for name in ("subject", "partitionkey"):
        if name in given:
            event[name] = _printable(given[name], name)
    if "dataschema" in given:
        schema = _string(given["dataschema"], "dataschema")
        if not is_absolute_uri(schema):
            raise InvalidEvent(
                "dataschema: must be a non-empty absolute URI (RFC 3986)", field="dataschema"
            )
        event["dataschema"] = schema
    for name, rule, form in (
        ("time", is_rfc3339, "an RFC 3339 date-time"),
        ("traceparent", is_traceparent, "a W3C traceparent"),
        ("tracestate", is_tracestate, "a W3C tracestate"),
    ):
        if name in given:
            value = _string(given[name], name)
            if not rule(value):
                raise InvalidEvent(f"{name}: must be {form}", field=name)
            event[name] = value
    for name in sorted(set(given) - _KNOWN):
        event[name] = _extension(name, given[name])
    text = canonical_json(event)
    size = len(text.encode("utf-8"))
    if size > MAX_EVENT_BYTES:
        raise InvalidEvent(
            f"event: its canonical JSON is {size} bytes, over the {MAX_EVENT_BYTES} limit",
            field="event",
        )
    return event, text


def _attributes(obj: object) -> dict[str, Any]:
    """The members of ``obj`` with plain-str names, null ones left out."""
    if not isinstance(obj, Mapping):
        raise InvalidEvent(f"event: must be a JSON object, got {type(obj).__name__}", field="event")
    given: dict[str, Any] = {}
    for name, value in obj.items():
        if not isinstance(name, str):
            raise InvalidEvent(
                f"event: attribute names must be strings, got {type(name).__name__}",
                field="event",
            )
        plain = check_text(name, "event")
        if plain in given:
            raise InvalidEvent(f"{shown_name(plain)}: appears twice", field=plain)
        if value is not None:
            given[plain] = value
    return given


@functools.cache
def _reference_types() -> EventTypes:
    # Made on first use, once the plug-ins imported with ``ackledger`` have registered.
    return EventTypes()


def _string(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidEvent(f"{name}: must be a string, got {type(value).__name__}", field=name)
    return check_text(value, name)


def check_source(value: object) -> str:
    """``value`` if it is an event's ``source`` (InvalidEvent naming ``source`` if not): also
    for a source that arrives alone, as a query's, before it goes near a database."""
    return _source(value)


def check_event_id(value: object, where: str = "id") -> str:
    """``value`` if it is an event's ``id`` (InvalidEvent naming ``where`` if not): also for
    an id that arrives alone, as a query's, before it goes near a database."""
    return _printable(value, "id") if where == "id" else _renamed(value, where)


def _renamed(value: object, where: str) -> str:
    try:
        return _printable(value, "id")
    except InvalidEvent as exc:
        raise InvalidEvent(where + str(exc)[2:], field=where) from None


def _source(value: object) -> str:
    source = _string(value, "source")
    if not (1 <= len(source) <= 256 and is_uri_reference(source)):
        raise InvalidEvent(
            "source: must be a URI-reference (RFC 3986) of 1-256 characters", field="source"
        )
    return source


def _printable(value: object, name: str) -> str:
    text = str.__str__(_string(value, name))
    if not 1 <= len(text) <= MAX_NAME:
        raise InvalidEvent(f"{name}: must be 1-{MAX_NAME} characters, got {len(text)}", field=name)
    if not is_printable(text):
        raise InvalidEvent(f"{name}: must hold printable characters only", field=name)
    return text


def _data(given: dict[str, Any], event: dict[str, Any], types: EventTypes) -> None:
    """``data`` by the declared media type: any JSON value for a JSON type (or none
    declared), a string for any other; or bytes as ``data_base64``, never both."""
    kind = event["type"]
    if "data_base64" in given:
        if "data" in given:
            raise InvalidEvent(
                "data_base64: an event carries data or data_base64, not both", field="data_base64"
            )
        if kind in types:
            raise InvalidEvent(f"data: missing (type {kind} has a schema)", field="data")
        encoded = _string(given["data_base64"], "data_base64")
        if not _BASE64.fullmatch(encoded):
            raise InvalidEvent("data_base64: must be base64 (RFC 4648)", field="data_base64")
        event["data_base64"] = encoded
        return
    if "data" not in given:
        if kind in types:
            raise InvalidEvent(f"data: missing (type {kind} has a schema)", field="data")
        return
    declared = event.get("datacontenttype")
    if declared is None or is_json_media_type(declared):
        data = copy_json(given["data"], "data")
    else:
        if not isinstance(given["data"], str):
            raise InvalidEvent(
                f"data: a {declared.split(';')[0]} event's data must be a string "
                "(or bytes as data_base64)",
                field="data",
            )
        data = str.__str__(check_text(given["data"], "data"))
    if kind in types:
        # The schema's answer is copied too: it may hold on to what it returned.
        data = copy_json(types.check(kind, data), "data")
    event["data"] = data


def decoded_data(event: Mapping[str, Any]) -> bytes:
    """The bytes of an event's ``data_base64`` (validated: it decodes)."""
    return binascii.a2b_base64(event["data_base64"])


def _extension(name: str, value: object) -> str | int | bool:
    if not _EXTENSION_NAME.fullmatch(name):
        raise InvalidEvent(
            f"{shown_name(name)}: an extension's name must be lowercase letters or digits",
            field=name,
        )
    if isinstance(value, str):
        text = check_text(value, name)
        if CONTROL.search(text):
            raise InvalidEvent(f"{name}: must hold no control characters", field=name)
        return str.__str__(text)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        if value not in _INT32:
            raise InvalidEvent(
                f"{name}: an extension's integer must be within the signed 32-bit range",
                field=name,
            )
        return int(value)
    raise InvalidEvent(
        f"{name}: an extension's value must be a string, an integer or a boolean, "
        f"got {type(value).__name__}",
        field=name,
    )
