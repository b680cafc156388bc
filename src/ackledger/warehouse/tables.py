"""The lab's own tables, ``orders`` and ``inventory``, and the statements on them.

They are the lab's business rows, written with ``execute`` on the transaction ackledger hands
out (the outbox's for an order, the inbox's for stock), as a user's domain writes its own.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Protocol

from ..errors import Conflict

ORDER_COLUMNS = ("id", "sku", "qty", "created_at")

ORDER_INSERT = (
    "INSERT INTO orders (id, sku, qty, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING RETURNING id"
)
ORDER_ROW = "SELECT id, sku, qty, created_at FROM orders WHERE id = ?"
#: The lab handler's one statement: add to a sku's stock.
INVENTORY_ADD = (
    "INSERT INTO inventory (sku, qty) VALUES (?, ?) "
    "ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty"
)
INVENTORY_READ = "SELECT qty FROM inventory WHERE sku = ?"
INVENTORY_LIKE = "SELECT sku, qty FROM inventory WHERE sku LIKE ?"


def tables_script(dialect: str) -> str:
    """The statements that make ``orders`` and ``inventory`` where they are missing
    (``migrations/<dialect>.sql``), which the store runs for the plug-in's first call."""
    return (
        resources.files("ackledger.warehouse")
        .joinpath("migrations", f"{dialect}.sql")
        .read_text(encoding="utf-8")
    )


class Executes(Protocol):
    """A transaction as the lab uses it: ``?`` placeholders, rows back."""

    def execute(self, sql: str, params: Any = ...) -> list[tuple[Any, ...]]: ...


def insert_order(tx: Executes, order: dict[str, Any], now: float) -> None:
    """Write a new order; Conflict if its id is there already (its event was then sent and
    purged: accepting it again would announce the same order twice)."""
    if not tx.execute(ORDER_INSERT, (order["id"], order["sku"], order["qty"], now)):
        raise Conflict(
            f"order {order['id']!r} was already accepted and its sent event purged; "
            "it cannot be accepted again"
        )


def order_row(tx: Executes, order_id: str) -> dict[str, Any] | None:
    rows = tx.execute(ORDER_ROW, (order_id,))
    return dict(zip(ORDER_COLUMNS, rows[0], strict=True)) if rows else None


def stock(tx: Executes, sku: str) -> int:
    rows = tx.execute(INVENTORY_READ, (sku,))
    return int(rows[0][0]) if rows else 0


def stock_like(tx: Executes, prefix: str) -> dict[str, int]:
    """The stock of every sku that starts with ``prefix`` (letters, digits and ``-`` only:
    nothing in it is a LIKE wildcard)."""
    return {str(sku): int(qty) for sku, qty in tx.execute(INVENTORY_LIKE, (prefix + "%",))}
