"""The lab's events as CONTRACT v2 carries them: ``warehouse.stock.added`` CloudEvents.

v1's tests spoke the flat order ``{"id", "sku", "qty"}``; ported tests build the event with
``lab`` (the same id, sku and qty) wherever they send or receive one, and keep the flat form
where they accept an order.
"""

from __future__ import annotations

from typing import Any

from ackledger import warehouse

#: The source of the lab events the tests build (an outbox stores its own; see ``of``).
SOURCE = "urn:ackledger:test"


def lab(event_id: str, sku: str, qty: int, *, source: str = SOURCE) -> dict[str, Any]:
    """The ``warehouse.stock.added`` event of a lab order."""
    return warehouse.event(event_id, sku, qty, source=source)


def of(order: dict[str, Any], *, source: str = SOURCE) -> dict[str, Any]:
    """``lab`` of a flat order ``{"id", "sku", "qty"}``."""
    return lab(order["id"], order["sku"], order["qty"], source=source)


def flat(event: dict[str, Any]) -> dict[str, Any]:
    """The flat order of a lab event (``seq`` and every other attribute dropped)."""
    return {"id": event["id"], "sku": event["data"]["sku"], "qty": event["data"]["qty"]}
