"""v1's rules of the lab's flat order ``{"id", "sku", "qty"}``: its checks, with v1's messages,
and its canonical text, which the ``warehouse.stock.added`` schema reuses for its ``data``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .._core.exact import is_int
from .._core.identifier import IDENTIFIER, check_identifier
from ..errors import InvalidEvent

EVENT_KEYS = ("id", "sku", "qty")
_EVENT_KEY_SET = frozenset(EVENT_KEYS)
MAX_QTY = 1_000_000


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
            and IDENTIFIER.fullmatch(event_id)
            and IDENTIFIER.fullmatch(sku)
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


def event_json(clean: dict[str, Any]) -> str:
    """``canonical_json`` of an event that ``validate_event`` returned, without the encoder.

    Identifiers are drawn from an alphabet that JSON never escapes and qty is a plain int, so
    formatting the three keys in sorted order gives exactly the canonical text, several times
    cheaper than ``json.dumps(sort_keys=True)``.
    """
    return f'{{"id":"{clean["id"]}","qty":{clean["qty"]},"sku":"{clean["sku"]}"}}'


def event_fingerprint(clean: dict[str, Any]) -> str:
    """``fingerprint`` of a validated event (see ``event_json``)."""
    return hashlib.sha256(event_json(clean).encode("ascii")).hexdigest()
