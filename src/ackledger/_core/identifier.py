"""The identifier rule: the alphabet of event ids, types, skus, case ids and work ids."""

from __future__ import annotations

import re

from ..errors import InvalidEvent

#: An identifier: letters, digits and . _ : -, starting with a letter or digit.
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


def check_identifier(value: object, field: str, max_len: int) -> str:
    """Return ``value`` if it is an identifier string of at most ``max_len`` chars."""
    if not isinstance(value, str):
        raise InvalidEvent(f"{field}: must be a string, got {type(value).__name__}", field=field)
    # The plain str of the same characters: a subclass's own len() or == cannot steer the
    # checks below or the SQL that gets it.
    value = str.__str__(value)
    if not 1 <= len(value) <= max_len:
        raise InvalidEvent(
            f"{field}: must be 1-{max_len} characters, got {len(value)}", field=field
        )
    if not IDENTIFIER.fullmatch(value):
        raise InvalidEvent(
            f"{field}: only letters, digits and . _ : - are allowed, "
            "and the first character must be a letter or digit",
            field=field,
        )
    return value
