"""The common event, checked in few steps: what the sink, the senders and the outbox see per
event on their hot paths.

A plain dict of the attributes most events carry, with plain ``str`` values and plain JSON
``data``, is checked here with exact type tests and the same patterns as the full rules
(``validate``). Anything else - a null member, a subclass, an extension, ``time`` or a trace
attribute, a refusal - returns None and goes the full way, which also says what is wrong. So
this path accepts nothing the full one refuses and returns the same event
(``tests/test_envelope_fast.py`` holds the two to each other).
"""

from __future__ import annotations

import math
import operator
import re
from json.encoder import encode_basestring
from typing import Any

from .._core.canonical import canonical_json
from .._core.identifier import IDENTIFIER
from .._core.printable import is_printable
from ..errors import InvalidEvent
from ..event_types import EventTypes
from .json_value import _SURROGATE, MAX_DEPTH, SAFE_INT_BITS
from .uri_reference import is_uri_reference

#: Sources repeat (one per producer): each is matched against RFC 3986 once.
_SOURCES: set[str] = set()
#: Types repeat too: each is matched against the type pattern once.
_KINDS: set[str] = set()
_MAX_KNOWN = 1024
#: The types taken here: the common reverse-DNS ones, none of whose characters JSON escapes
#: (the full rules accept any printable type).
_TYPE_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class _Slow(Exception):
    """Not the common case: take the full way."""


def fast_encoded(obj: dict[str, Any], types: EventTypes) -> tuple[dict[str, Any], str] | None:
    """The validated event and its canonical JSON, made in the same pass, or None when
    ``obj`` is not the common case (or is refused)."""
    # One frame: the checks run inside the ``try`` that turns "not the common case" (_Slow)
    # or a schema's refusal into None; the full way then says what is wrong, with its place.
    try:
        specversion, event_id = obj.get("specversion"), obj.get("id")
        source, kind = obj.get("source"), obj.get("type")
        if specversion != "1.0" or type(specversion) is not str:
            raise _Slow
        if type(event_id) is not str or len(event_id) > 128 or not IDENTIFIER.fullmatch(event_id):
            raise _Slow
        if type(kind) is not str or kind not in _KINDS:
            if type(kind) is not str or not _TYPE_NAME.fullmatch(kind):
                raise _Slow
            if len(_KINDS) < _MAX_KNOWN:
                _KINDS.add(kind)
        if type(source) is not str or source not in _SOURCES:
            if type(source) is not str or not 1 <= len(source) <= 256:
                raise _Slow
            if not is_uri_reference(source):
                raise _Slow
            if len(_SOURCES) < _MAX_KNOWN:
                _SOURCES.add(source)
        # The canonical JSON is written here, in sorted key order, instead of by the sorting
        # encoder afterwards: id and type are of their patterns' characters and a source of RFC
        # 3986's, none of which JSON escapes (tests/test_envelope_fast.py holds the text to
        # ``canonical_json``). Each part is empty or ends in a comma, and one f-string joins them.
        data_part = declared = key_part = subject_part = ""
        # Each member besides the four above must be one the fast path knows: counted off as
        # each is found (cheaper than a set test of the names), and settled before any schema
        # runs, so an event of other attributes is never checked twice by its schema.
        others = len(obj) - 4
        if "datacontenttype" in obj:
            if obj["datacontenttype"] != "application/json":
                raise _Slow
            if type(obj["datacontenttype"]) is not str:
                raise _Slow
            declared = '"datacontenttype":"application/json",'
            others -= 1
        # Printable ASCII of 1-256 characters, most subjects and keys, is tested here without
        # a call (the sink's every event carries both); anything else gets ``_printable``'s.
        if "partitionkey" in obj:
            key = obj["partitionkey"]
            if not (
                type(key) is str and 0 < len(key) <= 256 and key.isascii() and key.isprintable()
            ):
                key = _printable(key)
            key_part = '"partitionkey":' + _QUOTE(key) + ","
            others -= 1
        if "subject" in obj:
            subject = obj["subject"]
            if not (
                type(subject) is str
                and 0 < len(subject) <= 256
                and subject.isascii()
                and subject.isprintable()
            ):
                subject = _printable(subject)
            subject_part = '"subject":' + _QUOTE(subject) + ","
            others -= 1
        if "data" in obj:
            others -= 1
        if others:
            raise _Slow  # an extension, time, a trace attribute: the full way
        event: dict[str, Any] = {
            "specversion": "1.0",
            "id": event_id,
            "source": source,
            "type": kind,
        }
        if declared:
            event["datacontenttype"] = "application/json"
        schema = types.schema(kind)
        if "data" in obj:
            data = obj["data"]
            if data is None:
                raise _Slow  # a null member is absent: the full way says what that means
            if schema is not None:
                # A schema is given a copy, and may hold on to what it returned, so that is
                # copied too (below). Called as it is: a refusal goes the full way, which
                # restates it for the whole event.
                data = schema(_copy(data, 0))
            event["data"], data_text = _copied_text(data)
            data_part = '"data":' + data_text + ","
        elif schema is not None:
            raise _Slow
        if key_part:
            event["partitionkey"] = key
        if subject_part:
            event["subject"] = subject
        return event, (
            f'{{{data_part}{declared}"id":"{event_id}",{key_part}"source":"{source}",'
            f'"specversion":"1.0",{subject_part}"type":"{kind}"}}'
        )
    except (_Slow, InvalidEvent):
        return None


def _printable(text: object) -> str:
    """``text`` if it is a subject or partitionkey the full rules accept, else _Slow."""
    if type(text) is not str or not 1 <= len(text) <= 256:
        raise _Slow
    if not is_printable(text):
        raise _Slow
    return text


#: The canonical encoder's own pieces: strings as it quotes them (``ensure_ascii=False``),
#: and a nested value whole.
_QUOTE = encode_basestring
_ENCODE = canonical_json


#: A member's text in ``_copied_text``'s pairs (``map`` over it: no Python frame per call).
_MEMBER_TEXT = operator.itemgetter(1)


def _copied_text(value: Any) -> tuple[Any, str]:
    """A copy of a plain JSON value (as ``_copy``) and its canonical JSON. A flat object (of
    text, exact integers, booleans and nulls: most events' data) is written here in one pass,
    as the sorting encoder writes it (its setup costs more than the object); anything else
    is copied, then encoded."""
    if type(value) is dict:
        copied: dict[str, Any] = {}
        members: list[tuple[str, str]] = []
        for key, item in value.items():
            if type(key) is not str:
                raise _Slow
            kind = type(item)
            if kind is str:
                if not item.isascii() and _SURROGATE.search(item):
                    raise _Slow
                text = _QUOTE(item)
            elif kind is int:
                if item.bit_length() > SAFE_INT_BITS:
                    raise _Slow  # maybe too long to write: the full way tells
                text = int.__repr__(item)
            elif kind is bool:
                text = "true" if item else "false"
            elif item is None:
                text = "null"
            else:
                break  # nested or a float: the encoder's
            if not key.isascii() and _SURROGATE.search(key):
                raise _Slow
            copied[key] = item
            members.append((key, _QUOTE(key) + ":" + text))
        else:
            members.sort()  # by key, as ``sort_keys``: the keys are distinct
            return copied, "{" + ",".join(map(_MEMBER_TEXT, members)) + "}"
    copied_value = _copy(value, 0)
    return copied_value, _ENCODE(copied_value)


def _copy(value: Any, depth: int) -> Any:
    """A copy of a plain JSON value (exact types only), or _Slow for anything else."""
    kind = type(value)
    if kind is str:
        if not value.isascii() and _SURROGATE.search(value):
            raise _Slow
        return value
    if kind is bool or value is None:
        return value
    if kind is int:
        if value.bit_length() > SAFE_INT_BITS:
            raise _Slow  # maybe too long to write: the full way tells
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Slow
        return value
    if depth >= MAX_DEPTH:
        raise _Slow
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and _SURROGATE.search(key)):
                raise _Slow
            # ASCII text, a safe integer, a boolean or null is its own copy without a call
            # (most members).
            member = type(item)
            if (
                (member is str and item.isascii())
                or (member is int and item.bit_length() <= SAFE_INT_BITS)
                or member is bool
                or item is None
            ):
                out[key] = item
            else:
                out[key] = _copy(item, depth + 1)
        return out
    if kind is list:
        return [_copy(item, depth + 1) for item in value]
    raise _Slow
