"""Inbox and inventory queries beyond the idempotent claim (``keys.INBOX``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Tx

RECEIPT_COLUMNS = ("id", "sku", "qty", "first_received_at", "last_received_at", "receipts")


def add_stock(tx: Tx, added: Mapping[str, int]) -> None:
    """Add ``added[sku]`` to each sku's stock (one statement, run once per sku)."""
    if added:
        tx.executemany(
            "INSERT INTO inventory (sku, qty) VALUES (?, ?) "
            "ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty",
            list(added.items()),
        )


def reserve_arrivals(tx: Tx, count: int) -> int:
    """Take ``count`` numbers of the sink's arrival sequence; returns the one before the first.
    The counter row stays locked until the transaction ends, so the numbers follow commit
    order on every backend."""
    last = tx.scalar(
        "INSERT INTO counters (name, value) VALUES ('sink.arrival', ?) "
        "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value "
        "RETURNING value",
        (count,),
    )
    return int(last) - count


def note_receipt(tx: Tx, event_id: str, now: float, arrival: int) -> None:
    tx.execute(
        "UPDATE inbox SET receipts = receipts + 1, last_received_at = ?, last_arrival = ? "
        "WHERE id = ?",
        (now, arrival, event_id),
    )


def bump_counter(tx: Tx, name: str, by: int = 1) -> None:
    bump_counters(tx, {name: by})


def bump_counters(tx: Tx, counts: Mapping[str, int]) -> None:
    if counts:
        tx.executemany(
            "INSERT INTO counters (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value",
            list(counts.items()),
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
