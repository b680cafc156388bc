"""An event's identity and the fingerprint of its content (its canonical text is
``_core/canonical.py``'s, re-exported here)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .._core.canonical import canonical_json

#: The largest canonical JSON of an event, in UTF-8 bytes.
MAX_EVENT_BYTES = 64 * 1024

#: Attributes that describe one delivery rather than the event: a re-send of the same
#: event may carry another time or trace, and is still the same content.
NOT_CONTENT = frozenset({"time", "traceparent", "tracestate"})


def identity(event: Mapping[str, Any]) -> tuple[str, str]:
    """``(source, id)``: two events with the same pair are the same event."""
    return event["source"], event["id"]


def content_fingerprint(event: Mapping[str, Any]) -> str:
    """A SHA-256 (hex) of the canonical JSON of everything but time, traceparent and
    tracestate: equal for every re-send of one event, different for other content.

    ``datacontenttype: application/json`` exactly says what its absence says, and binary
    mode sends it (the Content-Type), so it is not content either: one event sent structured
    and then binary is the same event, and every fingerprint made before other media types
    were accepted stays what it was. Any other media type is content: the same bytes as XML
    and as text are different events."""
    content = {
        name: value
        for name, value in event.items()
        if name not in NOT_CONTENT and (name != "datacontenttype" or value != "application/json")
    }
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()


def fingerprint_of(event: Mapping[str, Any], text: str) -> str:
    """``content_fingerprint(event)`` given ``text``, the event's canonical JSON: when the
    event holds nothing but content, that text is the content's, and is hashed as it is."""
    if not event.keys().isdisjoint(_NOT_HASHED):
        return content_fingerprint(event)
    # ``encode()`` is UTF-8 without naming it: a named codec is looked up per call.
    return hashlib.sha256(text.encode()).hexdigest()


_NOT_HASHED = NOT_CONTENT | {"datacontenttype"}
