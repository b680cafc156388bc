"""The lab's event type, ``warehouse.stock.added``: its schema, its events, v1's forms.

Its ``data`` is exactly ``{"sku", "qty"}`` under v1's rules, checked by v1's own functions so
the two forms can never drift apart: ``sku`` 1-64 identifier characters, ``qty`` an int (not a
bool) from 1 to 1_000_000. ``validate`` keeps v1's strict check of the lab's flat order
``{"id", "sku", "qty"}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.canonical import fingerprint
from .._core.identifier import IDENTIFIER, check_identifier
from ..envelope import new_event
from ..errors import InvalidEvent
from . import v1

TYPE = "warehouse.stock.added"
#: The source of the events ``event`` builds when the caller names none.
SOURCE = "urn:ackledger:warehouse"
DATA_KEYS = ("sku", "qty")
#: The source of every event and receipt a v1 database held (store migration 0007): v1 knew
#: events by id alone, so they all share one source.
LEGACY_SOURCE = "urn:ackledger:v1"
#: Skus repeat (a store has so many): each is matched against the identifier pattern once,
#: and only the first 1024 are kept.
_SKUS: set[str] = set()
_MAX_KNOWN = 1024


def check_data(data: Any) -> dict[str, Any]:
    """The schema of ``warehouse.stock.added``: return ``{"sku", "qty"}`` checked, or raise
    InvalidEvent naming the field (the registry reports it as ``data.<field>``)."""
    if type(data) is dict and len(data) == 2:
        # The common case in a few exact steps; anything else gets the full check's message.
        sku, qty = data.get("sku"), data.get("qty")
        if type(sku) is str and type(qty) is int and 1 <= qty <= v1.MAX_QTY:
            if sku in _SKUS:
                return {"sku": sku, "qty": qty}
            if len(sku) <= 64 and IDENTIFIER.fullmatch(sku):
                if len(_SKUS) < _MAX_KNOWN:
                    _SKUS.add(sku)
                return {"sku": sku, "qty": qty}
    if not isinstance(data, dict):
        raise InvalidEvent(f"must be a JSON object, got {type(data).__name__}")
    v1.check_keys(data, DATA_KEYS)
    return {
        "sku": check_identifier(data["sku"], "sku", 64),
        "qty": v1.check_quantity(data["qty"], "qty"),
    }


def event(id: str, sku: str, qty: int, *, source: str = SOURCE) -> dict[str, Any]:
    """A validated ``warehouse.stock.added`` event; its subject and partitionkey are the sku,
    so one sku's events keep their order and other skus' events need not wait for them.
    Its id keeps v1's identifier rule (the lab's orders are v1's)."""
    return new_event(
        TYPE,
        {"sku": sku, "qty": qty},
        source=source,
        id=check_identifier(id, "id", 128),
        subject=sku,
        partitionkey=sku,
    )


def validate(order: object) -> dict[str, Any]:
    """v1's strict check of the flat order ``{"id", "sku", "qty"}``, with v1's messages."""
    return v1.validate_event(order)


def v1_fingerprint(event: Mapping[str, Any]) -> str | None:
    """The fingerprint v1 stored for this event, if it is a lab event of a v1 database (its
    outbox and inbox rows keep v1's fingerprints); else None."""
    if event.get("source") != LEGACY_SOURCE or event.get("type") != TYPE:
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    return fingerprint({"id": event["id"], "sku": data.get("sku"), "qty": data.get("qty")})
