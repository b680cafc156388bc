"""The reference domain (the seeds' lab) as a plug-in: the ``warehouse.stock.added`` event
type, its handler (stock added to ``inventory``), its orders (``Outbox.accept``) and v1's
forms of its events. Registered when imported, which ``import ackledger`` does: its type is
always there, and a user's handler for it replaces the lab's.
"""

from __future__ import annotations

from .. import plugins
from . import schema
from .calls import accept, order_of, stock_of
from .handler import apply
from .schema import (
    DATA_KEYS,
    LEGACY_SOURCE,
    SOURCE,
    TYPE,
    check_data,
    event,
    v1_fingerprint,
    validate,
)
from .tables import INVENTORY_ADD, stock_like, tables_script

__all__ = [
    "DATA_KEYS",
    "INVENTORY_ADD",
    "LEGACY_SOURCE",
    "SOURCE",
    "TYPE",
    "apply",
    "check_data",
    "event",
    "schema",
    "stock_like",
    "v1_fingerprint",
    "validate",
]

plugins.register(
    plugins.Plugin(
        TYPE,
        check_data,
        apply,
        v1_fingerprint,
        {"accept": accept, "stock": stock_of, "order": order_of},
        tables_script,
    )
)
