"""The rules of a CloudEvents 1.0 event (CONTRACT section 1), checked one attribute at a time.

The first broken rule raises InvalidEvent naming its attribute, in this order: the required
attributes, then ``datacontenttype`` and ``data`` (so a type's schema speaks before the
attributes often derived from the data), the other known attributes, the extensions by
name, and last the size of the whole.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from .._core.identifier import check_identifier
from ..errors import InvalidEvent
from ..event_types import EventTypes, check_type_name
from .content import MAX_EVENT_BYTES, canonical_json
from .fast import fast_encoded
from .json_value import check_text, copy_json, shown_name
from .timestamp import is_rfc3339
from .trace_context import is_traceparent, is_tracestate
from .uri_reference import is_uri_reference

_KNOWN = frozenset(
    {
        "specversion",
        "id",
        "source",
        "type",
        "datacontenttype",
        "data",
        "subject",
        "time",
        "partitionkey",
        "traceparent",
        "tracestate",
    }
)
_EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")
# "Printable" is a fixed list, not str.isprintable: that one refuses characters its Python's
# Unicode tables do not know yet, so a newer source could emit what an older sink refuses.
# Refused: C0 and C1 controls and DEL, line and paragraph separators, bidirectional-text
# controls (they make a log line read differently from what it holds), and surrogates.
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
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
    event["id"] = str.__str__(check_identifier(given["id"], "id", 128))
    event["source"] = _source(given["source"])
    event["type"] = check_type_name(given["type"])
    if "datacontenttype" in given:
        if _string(given["datacontenttype"], "datacontenttype") != "application/json":
            raise InvalidEvent(
                'datacontenttype: only "application/json" is accepted', field="datacontenttype"
            )
        event["datacontenttype"] = "application/json"
    _data(given, event, types)
    for name in ("subject", "partitionkey"):
        if name in given:
            event[name] = _printable(given[name], name)
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


def _source(value: object) -> str:
    source = _string(value, "source")
    if not (1 <= len(source) <= 256 and is_uri_reference(source)):
        raise InvalidEvent(
            "source: must be a URI-reference (RFC 3986) of 1-256 characters", field="source"
        )
    return source


def _printable(value: object, name: str) -> str:
    text = _string(value, name)
    if not 1 <= len(text) <= 256:
        raise InvalidEvent(f"{name}: must be 1-256 characters, got {len(text)}", field=name)
    if _UNPRINTABLE.search(text):
        raise InvalidEvent(f"{name}: must hold printable characters only", field=name)
    return text


def _data(given: dict[str, Any], event: dict[str, Any], types: EventTypes) -> None:
    if "data_base64" in given:
        raise InvalidEvent(
            "data_base64: binary data is not accepted; data must be a JSON value",
            field="data_base64",
        )
    kind = event["type"]
    if "data" not in given:
        if kind in types:
            raise InvalidEvent(f"data: missing (type {kind} has a schema)", field="data")
        return
    data = copy_json(given["data"], "data")
    if kind in types:
        # The schema's answer is copied too: it may hold on to what it returned.
        data = copy_json(types.check(kind, data), "data")
    event["data"] = data


def _extension(name: str, value: object) -> str | int | float | bool:
    if not _EXTENSION_NAME.fullmatch(name):
        raise InvalidEvent(
            f"{shown_name(name)}: an extension's name must be 1-20 lowercase letters or digits",
            field=name,
        )
    if not isinstance(value, str | int | float):  # bool is an int
        raise InvalidEvent(
            f"{name}: an extension's value must be a string, number or boolean, "
            f"got {type(value).__name__}",
            field=name,
        )
    copied: str | int | float | bool = copy_json(value, name)
    return copied
