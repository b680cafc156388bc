"""The lab's calls that the contract keeps on ``Outbox`` and ``Inbox`` (``accept``,
``stock``, ``order``); those methods find them through the plug-in registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..event import check_identifier
from .schema import event, validate
from .tables import Executes, insert_order, order_row, stock


def accept(order: object, source: str) -> tuple[dict[str, Any], Callable[[Any, float], None]]:
    """Validate the flat order; returns its event and the write of its ``orders`` row, which
    ``Outbox.accept`` runs in the event's transaction when the event is new."""
    clean = validate(order)
    found = event(clean["id"], clean["sku"], clean["qty"], source=source)

    def write(tx: Executes, now: float) -> None:
        insert_order(tx, clean, now)

    return found, write


def stock_of(tx: Executes, sku: str) -> int:
    """A sku's stock, 0 for one never added to."""
    return stock(tx, check_identifier(sku, "sku", 64))


def order_of(tx: Executes, order_id: str) -> dict[str, Any] | None:
    return order_row(tx, order_id)
