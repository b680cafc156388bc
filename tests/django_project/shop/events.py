"""The shop's one event: an order placed, known by its order number."""

from __future__ import annotations

from typing import Any

from ackledger import new_event

from .models import Order


def order_placed(order: Order) -> dict[str, Any]:
    return new_event(
        "com.example.order.placed",
        {"order": order.number, "sku": order.sku, "qty": order.qty},
        source="/shop",
        id=f"order-{order.number}",
    )
