"""The shop's handlers: each gets Django's connection and the event, inside the receipt's
transaction; it writes with the models."""

from __future__ import annotations

from typing import Any

from .models import Shipment


class OutOfStockError(Exception):
    pass


def ship(connection: Any, event: dict[str, Any]) -> None:
    data = event["data"]
    Shipment.objects.create(order_number=data["order"], sku=data["sku"], qty=data["qty"])
    if data["sku"] == "out-of-stock":
        raise OutOfStockError(data["order"])


HANDLERS = {"com.example.order.placed": ship}
