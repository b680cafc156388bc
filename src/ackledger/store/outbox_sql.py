"""Outbox queries beyond the idempotent claim (which lives in ``keys.OUTBOX``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Tx

PENDING_COLUMNS = ("seq", "id", "sku", "qty")


def insert_order(tx: Tx, event: dict[str, Any], now: float) -> None:
    tx.execute(
        "INSERT INTO orders (id, sku, qty, created_at) VALUES (?, ?, ?, ?)",
        (event["id"], event["sku"], event["qty"], now),
    )


def pending(tx: Tx, limit: int) -> list[dict[str, Any]]:
    # The WHERE clause matches the partial index outbox_pending exactly.
    rows = tx.execute(
        "SELECT seq, id, sku, qty FROM outbox WHERE sent = 0 AND quarantined = 0 "
        "ORDER BY seq LIMIT ?",
        (limit,),
    )
    return [dict(zip(PENDING_COLUMNS, row, strict=True)) for row in rows]


#: Ids per UPDATE in mark_sent: far below every backend's limit on bound parameters.
MARK_CHUNK = 256


def mark_sent(tx: Tx, ids: Sequence[str], attempted: bool, now: float) -> list[str]:
    """Mark ids sent (a batch in one statement); returns the ids that are unknown, in order."""
    bump = 1 if attempted else 0
    found: set[str] = set()
    unique = list(dict.fromkeys(ids))  # an id given twice is one mark and one attempt
    for start in range(0, len(unique), MARK_CHUNK):
        chunk = unique[start : start + MARK_CHUNK]
        marks = ", ".join("?" * len(chunk))
        rows = tx.execute(
            "UPDATE outbox SET sent = 1, sent_at = COALESCE(sent_at, ?), "
            "attempts = attempts + ?, last_attempt_at = CASE WHEN ? = 1 THEN ? "
            f"ELSE last_attempt_at END WHERE id IN ({marks}) RETURNING id",
            (now, bump, bump, now, *chunk),
        )
        found.update(str(row[0]) for row in rows)
    return [event_id for event_id in ids if event_id not in found]


def record_failure(tx: Tx, event_id: str, error: str, now: float) -> bool:
    rows = tx.execute(
        "UPDATE outbox SET attempts = attempts + 1, last_error = ?, last_attempt_at = ? "
        "WHERE id = ? RETURNING seq",
        (error, now, event_id),
    )
    return bool(rows)


def event_row(tx: Tx, event_id: str) -> dict[str, Any] | None:
    columns = (
        "seq", "id", "sku", "qty", "partition_key", "sent", "quarantined", "quarantine_reason",
        "quarantined_at", "created_at", "sent_at", "attempts", "last_error", "last_attempt_at",
    )  # fmt: skip
    row = tx.one(f"SELECT {', '.join(columns)} FROM outbox WHERE id = ?", (event_id,))
    return None if row is None else dict(zip(columns, row, strict=True))


def order_row(tx: Tx, event_id: str) -> dict[str, Any] | None:
    row = tx.one("SELECT id, sku, qty, created_at FROM orders WHERE id = ?", (event_id,))
    return None if row is None else dict(zip(("id", "sku", "qty", "created_at"), row, strict=True))
