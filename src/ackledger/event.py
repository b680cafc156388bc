"""Events of the reference warehouse domain: validation, canonical JSON, fingerprints."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ._core.exact import is_int
from .errors import InvalidEvent

EVENT_KEYS = ("id", "sku", "qty")
_EVENT_KEY_SET = frozenset(EVENT_KEYS)
MAX_QTY = 1_000_000

# An identifier: letters, digits and . _ : -, starting with a letter or digit.
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


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
    if not _ID_RE.fullmatch(value):
        raise InvalidEvent(
            f"{field}: only letters, digits and . _ : - are allowed, "
            "and the first character must be a letter or digit",
            field=field,
        )
    return value


def validate_event(obj: object) -> dict[str, Any]:
    """Return a new, validated ``{"id", "sku", "qty"}`` dict or raise :class:`InvalidEvent`."""
    # The common case, a plain dict of exactly a str, a str and an int, is checked in a few
    # steps; it accepts nothing the full check below would refuse (exact types only, so no
    # bool and no subclass), and anything else goes through the full check and its messages.
    if type(obj) is dict and obj.keys() == _EVENT_KEY_SET:
        event_id, sku, qty = obj["id"], obj["sku"], obj["qty"]
        if (
            type(event_id) is str
            and type(sku) is str
            and type(qty) is int
            and 1 <= qty <= MAX_QTY
            and len(event_id) <= 128
            and len(sku) <= 64
            and _ID_RE.fullmatch(event_id)
            and _ID_RE.fullmatch(sku)
        ):
            return {"id": event_id, "sku": sku, "qty": qty}
    return _validate_fully(obj)


def _validate_fully(obj: object) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise InvalidEvent(f"event: must be a JSON object, got {type(obj).__name__}", field="event")
    check_keys(obj, EVENT_KEYS)
    # str.__str__ turns a str subclass into a plain str with the same characters, so nothing
    # downstream (event_json included) can be steered by a subclass's own methods.
    event_id = str.__str__(check_identifier(obj["id"], "id", 128))
    sku = str.__str__(check_identifier(obj["sku"], "sku", 64))
    return {"id": event_id, "sku": sku, "qty": check_quantity(obj["qty"], "qty")}


def check_keys(obj: Mapping[Any, Any], keys: tuple[str, ...]) -> None:
    """Raise :class:`InvalidEvent` unless ``obj`` has exactly ``keys``: the first missing one
    (in ``keys`` order) is named, else the first unknown one (sorted)."""
    present = set(obj.keys())
    missing = [k for k in keys if k not in present]
    if missing:
        raise InvalidEvent(f"{missing[0]}: missing", field=missing[0])
    extra = sorted(str(k) for k in present - set(keys))
    if extra:
        raise InvalidEvent(f"{extra[0]}: unknown field", field=extra[0])


def check_quantity(value: object, field: str) -> int:
    """Return ``value`` as a plain int if it is an integer 1..MAX_QTY."""
    # bool is a subclass of int; True is not a quantity.
    if not is_int(value):
        raise InvalidEvent(f"{field}: must be an integer, got {type(value).__name__}", field=field)
    if not 1 <= value <= MAX_QTY:
        raise InvalidEvent(f"{field}: must be between 1 and {MAX_QTY}, got {value}", field=field)
    return int(value)


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and no whitespace: equal content, equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(obj: object) -> str:
    """A SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def event_json(clean: dict[str, Any]) -> str:
    """``canonical_json`` of an event that ``validate_event`` returned, without the encoder.

    Identifiers are drawn from an alphabet that JSON never escapes and qty is a plain int, so
    formatting the three keys in sorted order gives exactly the canonical text; it is several
    times cheaper than ``json.dumps(sort_keys=True)`` on the relay's and the sink's hot paths.
    """
    return f'{{"id":"{clean["id"]}","qty":{clean["qty"]},"sku":"{clean["sku"]}"}}'


def event_fingerprint(clean: dict[str, Any]) -> str:
    """``fingerprint`` of a validated event (see ``event_json``)."""
    return hashlib.sha256(event_json(clean).encode("ascii")).hexdigest()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return found


#: Parses JSON text refusing an object with a key given twice: json.loads keeps the last one,
#: and another parser might keep the first, so such a body could mean two different events.
_STRICT_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys)


def parse_strict_json(text: str) -> Any:
    """``json.loads`` for input from outside; raises ValueError (RecursionError when nested
    past the parser's stack) for anything that is not one unambiguous JSON value."""
    # ``decode`` is two Python frames and two whitespace matches around the C scanner: a
    # text that starts with its value and ends with it (what every sender here writes) is
    # scanned directly; anything else takes ``decode``, which also words any error.
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _STRICT_JSON.decode(text)
    if end != len(text):
        return _STRICT_JSON.decode(text)
    return value


#: The decoder's C scanner (set by ``JSONDecoder.__init__``; typeshed does not declare it).
_SCAN: Callable[[str, int], tuple[Any, int]] = _STRICT_JSON.scan_once  # type: ignore[attr-defined]
