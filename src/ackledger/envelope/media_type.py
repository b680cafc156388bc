"""Media types (RFC 9110 section 8.3.1), the form of an event's ``datacontenttype``."""

from __future__ import annotations

import re

_TCHARS = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
_MEDIA_TYPE = re.compile(
    rf"{_TCHARS}/{_TCHARS}(?:[ \t]*;[ \t]*(?:{_TCHARS}=(?:{_TCHARS}|{_QUOTED}))?)*"
)


def is_media_type(text: str) -> bool:
    """True if ``text`` is ``type/subtype`` with optional ``; name=value`` parameters."""
    return _MEDIA_TYPE.fullmatch(text) is not None


def essence(text: str) -> str:
    """``type/subtype`` in lowercase, without parameters: what a media type is."""
    return text.split(";", 1)[0].strip().lower()


def is_json_media_type(text: str) -> bool:
    """A JSON media type (``application/json``, any ``+json``, ``text/json``): its data is
    a JSON value, carried as such in the JSON format and read as JSON from a binary body."""
    found = essence(text)
    return found in ("application/json", "text/json") or found.endswith("+json")


def parameter(text: str, name: str) -> str | None:
    """The value of the parameter ``name`` (lowercase) of a media type, unquoted, or None."""
    for part in text.split(";")[1:]:
        key, equals, value = part.partition("=")
        if equals and key.strip().lower() == name:
            return value.strip().strip('"')
    return None
