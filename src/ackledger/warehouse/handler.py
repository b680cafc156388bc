"""The lab's handler: an ordinary one, as a user would write it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .tables import INVENTORY_ADD, Executes


def apply(tx: Executes, event: Mapping[str, Any]) -> None:
    """Add the event's ``qty`` to ``inventory[sku]``, inside the inbox's transaction."""
    data = event["data"]
    tx.execute(INVENTORY_ADD, (data["sku"], data["qty"]))
