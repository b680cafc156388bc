"""Inbox and inventory queries beyond the idempotent claim (``keys.INBOX``)."""

from __future__ import annotations

from typing import Any

from .base import Tx

RECEIPT_COLUMNS = ("id", "sku", "qty", "first_received_at", "last_received_at", "receipts")


def add_stock(tx: Tx, sku: str, qty: int) -> None:
    tx.execute(
        "INSERT INTO inventory (sku, qty) VALUES (?, ?) "
        "ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty",
        (sku, qty),
    )


def next_arrival(tx: Tx) -> int:
    """The next number of the sink's arrival sequence. The counter row stays locked until the
    transaction ends, so the numbers follow commit order on every backend."""
    return int(
        tx.scalar(
            "INSERT INTO counters (name, value) VALUES ('sink.arrival', 1) "
            "ON CONFLICT (name) DO UPDATE SET value = counters.value + 1 RETURNING value"
        )
    )


def note_receipt(tx: Tx, event_id: str, now: float, arrival: int) -> None:
    tx.execute(
        "UPDATE inbox SET receipts = receipts + 1, last_received_at = ?, last_arrival = ? "
        "WHERE id = ?",
        (now, arrival, event_id),
    )


def bump_counter(tx: Tx, name: str, by: int = 1) -> None:
    tx.execute(
        "INSERT INTO counters (name, value) VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value",
        (name, by),
    )


def counters(tx: Tx, prefix: str) -> dict[str, int]:
    rows = tx.execute("SELECT name, value FROM counters WHERE name LIKE ?", (prefix + "%",))
    return {str(name)[len(prefix) :]: int(value) for name, value in rows}


def stock(tx: Tx, sku: str) -> int:
    value = tx.scalar("SELECT qty FROM inventory WHERE sku = ?", (sku,))
    return 0 if value is None else int(value)


def receipt(tx: Tx, event_id: str) -> dict[str, Any] | None:
    row = tx.one(f"SELECT {', '.join(RECEIPT_COLUMNS)} FROM inbox WHERE id = ?", (event_id,))
    return None if row is None else dict(zip(RECEIPT_COLUMNS, row, strict=True))
