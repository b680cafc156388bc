"""JSON values: what may travel inside an event, copied into plain, independent objects."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidEvent

#: Deeper nesting is refused: Python's own encoder and decoder stop near 1000 levels, and
#: common parsers elsewhere stop far earlier (serde_json at 128), so an event that deep
#: could be written here and be unreadable at the other end.
MAX_DEPTH = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_:-]{1,40}")  # no "." or "[": they build paths


def shown_name(name: str) -> str:
    """``name`` as a message may print it: plain when short and of a safe alphabet, else quoted
    and cut, so a key full of newlines or 60 KiB long cannot garble a log line."""
    if _PLAIN_NAME.fullmatch(name):
        return name
    cut = name[:40]
    return json.dumps(cut) + ("..." if len(cut) < len(name) else "")


def check_text(value: str, where: str) -> str:
    """Return ``value`` as a plain str, refusing lone surrogates (UTF-8 cannot encode them)."""
    text: str = copy_json(value, where)
    return text


class _Refused(Exception):
    """A refusal deep inside a value; the path is collected while it unwinds, so the
    accepted case never spends time building paths."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.steps: list[str] = []


def copy_json(value: object, where: str) -> Any:
    """Return a deep copy of ``value`` built from plain dict, list, str, int, float, bool and
    None, or raise :class:`InvalidEvent` naming the offending place (``data.items[2].name``).

    JSON has no NaN or infinities, only string keys and only whole Unicode text; a bool
    stays a bool (never a number). Objects may be any Mapping, arrays a list or tuple.
    """
    try:
        return _copy(value, 0)
    except _Refused as refused:
        place = where + "".join(reversed(refused.steps))
        raise InvalidEvent(f"{place}: {refused.reason}", field=place) from None


def _copy(value: object, depth: int) -> Any:
    kind = type(value)
    if value is None or kind is bool:
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int):
        # The base class's own conversion: a subclass's __int__ cannot change the number.
        whole = int.__int__(value)
        return whole if whole.bit_length() <= SAFE_INT_BITS else _writable(whole)
    if isinstance(value, float):
        number = float.__float__(value)
        if not math.isfinite(number):
            raise _Refused(f"{number!r} is not a JSON number")
        return number
    if depth >= MAX_DEPTH:
        raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        return _copy_object(value, depth + 1)
    if isinstance(value, list | tuple):
        return _copy_array(value, depth + 1)
    raise _Refused(f"{kind.__name__} is not a JSON value")


#: Fewer bits than this make fewer than 4,300 digits, the default limit of CPython's int to
#: text conversion (``sys.get_int_max_str_digits``): only a longer int is tried.
SAFE_INT_BITS = 14_000


def _writable(number: int) -> int:
    """``number`` if the JSON encoder can write it, else refused (it would raise ValueError
    when the canonical JSON is made, after validation said yes)."""
    try:
        int.__repr__(number)
    except ValueError:
        raise _Refused("an integer with more digits than can be written as JSON text") from None
    return number


def _text(value: str) -> str:
    if _SURROGATE.search(value):
        raise _Refused("contains a lone surrogate, which is not text")
    # str.__str__ turns a str subclass into a plain str: no subclass method can act later.
    return str.__str__(value)


def _copy_array(value: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
    out = []
    for index, item in enumerate(value):
        try:
            out.append(_copy(item, depth))
        except _Refused as refused:
            refused.steps.append(f"[{index}]")
            raise
    return out


def _copy_object(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _Refused(f"object keys must be strings, got {type(key).__name__}")
        name = _text(key)
        if name in out:
            # Only a str subclass with an equality of its own gets here: keep neither.
            raise _Refused(f"key {shown_name(name)} appears twice")
        try:
            out[name] = _copy(item, depth)
        except _Refused as refused:
            shown = shown_name(name)
            refused.steps.append(f".{name}" if shown == name else f"[{shown}]")
            raise
    return out
