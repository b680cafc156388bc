"""The lab's calls that the contract keeps on ``Outbox`` and ``Inbox`` (``accept``,
``stock``, ``order``); those methods find them through the plug-in registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.identifier import check_identifier
from .schema import event, validate
from .tables import Executes, insert_order, order_row, stock

if TYPE_CHECKING:
    from ..store import Backend


def accept(order: object, source: str) -> tuple[dict[str, Any], Callable[[Any, float], None]]:
    """Validate the flat order; returns its event and the write of its ``orders`` row, which
    ``Outbox.accept`` runs in the event's transaction when the event is new."""
    clean = validate(order)
    found = event(clean["id"], clean["sku"], clean["qty"], source=source)

    def write(tx: Executes, now: float) -> None:
        insert_order(tx, clean, now)

    return found, write


def stock_of(backend: Backend, sku: str) -> int:
    """A sku's stock, 0 for one never added to (``Inbox.stock``)."""
    sku = check_identifier(sku, "sku", 64)
    with backend.read() as tx:
        # Only reads (a write would wait behind a busy sink): before the lab's first event
        # its tables do not exist, and every stock is 0.
        return stock(tx, sku) if backend.has_table(tx, "inventory") else 0


def order_of(backend: Backend, order_id: str) -> dict[str, Any] | None:
    """The order of this id, or None (``Outbox.order``); only reads: without the lab's
    tables, None."""
    with backend.read() as tx:
        return order_row(tx, order_id) if backend.has_table(tx, "orders") else None
