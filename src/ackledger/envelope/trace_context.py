"""W3C Trace Context values, the CloudEvents distributed-tracing extension's attributes."""

from __future__ import annotations

import re

# version "-" trace-id "-" parent-id "-" trace-flags, all lowercase hex. Version ff is
# invalid; a later version may append "-" and fields of its own, which a reader keeps.
_TRACEPARENT = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-[\x21-\x7e]*)?"
)
_ZERO_TRACE_ID = "0" * 32
_ZERO_PARENT_ID = "0" * 16

# A list-member's key: simple, or tenant@system; its value: printable ASCII but "," and
# "=", spaces allowed except at the end (W3C Trace Context, section 3.3.1).
_KEY_CHARS = r"[a-z0-9_\-*/]"
_MEMBER = re.compile(
    rf"(?:[a-z]{_KEY_CHARS}{{0,255}}|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
_MAX_MEMBERS = 32


def is_traceparent(text: str) -> bool:
    """True if ``text`` is a W3C ``traceparent`` header value."""
    found = _TRACEPARENT.fullmatch(text)
    if not found:
        return False
    version, trace_id, parent_id, tail = found.groups()
    if version == "ff" or (version == "00" and tail is not None):
        return False
    return trace_id != _ZERO_TRACE_ID and parent_id != _ZERO_PARENT_ID


def is_tracestate(text: str) -> bool:
    """True if ``text`` is a W3C ``tracestate`` header value: at most 32 list-members with
    distinct keys; empty members and spaces or tabs around the commas are allowed."""
    members = [member.strip(" \t") for member in text.split(",")]
    keys = []
    for member in members:
        if not member:
            continue
        if not _MEMBER.fullmatch(member):
            return False
        keys.append(member.partition("=")[0])
    return len(keys) <= _MAX_MEMBERS and len(set(keys)) == len(keys)
