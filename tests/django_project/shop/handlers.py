"""The shop's handlers: each gets Django's connection and the event, inside the receipt's
transaction; it writes with the models."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .models import Shipment


class OutOfStockError(Exception):
    pass


def ship(connection: Any, event: dict[str, Any]) -> None:
    data = event["data"]
    Shipment.objects.create(order_number=data["order"], sku=data["sku"], qty=data["qty"])
    # SHOP_SHIP_SECONDS: every shipment holds its transaction open that long, so that a kill
    # -9 at a random moment often finds one written and not yet committed.
    time.sleep(float(os.environ.get("SHOP_SHIP_SECONDS", "0")))
    # For the tests of two receivers at once: say the shipment is written, then hold the
    # transaction open a while, and (SHOP_FAIL_AFTER_PAUSE) fail at its end.
    pause = float(data.get("pause", 0))
    if pause:
        print("handling", flush=True, file=sys.stderr)
        time.sleep(pause)
        if os.environ.get("SHOP_FAIL_AFTER_PAUSE"):
            raise OutOfStockError(data["order"])
    if data["sku"] == "out-of-stock":
        raise OutOfStockError(data["order"])


HANDLERS = {"com.example.order.placed": ship}
