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


#: Rows a spread counter uses at most on PostgreSQL (see ``bump_spread_counter``).
COUNTER_SHARDS = 64


def bump_spread_counter(tx: Tx, name: str) -> None:
    """Add one to a counter that many transactions bump at once, without making them queue.

    A counter row stays locked from its bump until the transaction ends, commit included, so
    one row bumped by every transaction makes them take turns. On PostgreSQL the counter is
    spread over rows ``name#N``, N picked by the connection's server process, so concurrent
    transactions (on other connections) mostly bump other rows. ``counters`` sums the rows.
    SQLite has one writer at a time anyway: one row.
    """
    if tx.dialect != "postgres":
        bump_counter(tx, name)
        return
    tx.execute(
        "INSERT INTO counters (name, value) VALUES (? || '#' || (pg_backend_pid() % ?), 1) "
        "ON CONFLICT (name) DO UPDATE SET value = counters.value + 1",
        (name, COUNTER_SHARDS),
    )


def counters(tx: Tx, prefix: str) -> dict[str, int]:
    """The counters named ``prefix...``, without the prefix; a spread counter's rows summed."""
    rows = tx.execute("SELECT name, value FROM counters WHERE name LIKE ?", (prefix + "%",))
    found: dict[str, int] = {}
    for name, value in rows:
        short = str(name)[len(prefix) :].split("#", 1)[0]
        found[short] = found.get(short, 0) + int(value)
    return found


def stock(tx: Tx, sku: str) -> int:
    value = tx.scalar("SELECT qty FROM inventory WHERE sku = ?", (sku,))
    return 0 if value is None else int(value)


def receipt(tx: Tx, event_id: str) -> dict[str, Any] | None:
    row = tx.one(f"SELECT {', '.join(RECEIPT_COLUMNS)} FROM inbox WHERE id = ?", (event_id,))
    return None if row is None else dict(zip(RECEIPT_COLUMNS, row, strict=True))
