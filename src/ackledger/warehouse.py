"""The reference domain (the seeds' lab): the ``warehouse.stock.added`` event type.

Its ``data`` is exactly ``{"sku", "qty"}`` under v1's rules, checked by v1's own functions so
the two forms can never drift apart: ``sku`` 1-64 identifier characters, ``qty`` an int (not a
bool) from 1 to 1_000_000. ``validate`` keeps v1's strict check of the lab's flat order
``{"id", "sku", "qty"}``.
"""

from __future__ import annotations

from typing import Any

from . import event as v1
from .envelope import new_event
from .errors import InvalidEvent

TYPE = "warehouse.stock.added"
#: The source of the events ``event`` builds when the caller names none.
SOURCE = "urn:ackledger:warehouse"
DATA_KEYS = ("sku", "qty")


def check_data(data: Any) -> dict[str, Any]:
    """The schema of ``warehouse.stock.added``: return ``{"sku", "qty"}`` checked, or raise
    InvalidEvent naming the field (the registry reports it as ``data.<field>``)."""
    if not isinstance(data, dict):
        raise InvalidEvent(f"must be a JSON object, got {type(data).__name__}")
    v1.check_keys(data, DATA_KEYS)
    return {
        "sku": v1.check_identifier(data["sku"], "sku", 64),
        "qty": v1.check_quantity(data["qty"], "qty"),
    }


def event(id: str, sku: str, qty: int, *, source: str = SOURCE) -> dict[str, Any]:
    """A validated ``warehouse.stock.added`` event; its subject and partitionkey are the sku,
    so one sku's events keep their order and other skus' events need not wait for them."""
    return new_event(
        TYPE, {"sku": sku, "qty": qty}, source=source, id=id, subject=sku, partitionkey=sku
    )


def validate(order: object) -> dict[str, Any]:
    """v1's strict check of the flat order ``{"id", "sku", "qty"}``, with v1's messages."""
    return v1.validate_event(order)
