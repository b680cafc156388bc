"""Outbox queries beyond the idempotent claim (which lives in ``keys.OUTBOX``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Tx

PENDING_COLUMNS = ("seq", "id", "sku", "qty")


#: The first key of the advisory locks that serialise enqueues per partition (PostgreSQL).
PARTITION_LOCK_CLASS = 0x6F627078  # "obpx"


def lock_partition(tx: Tx, partition_key: str) -> None:
    """Make enqueues into one partition commit in seq order (PostgreSQL; SQLite already does).

    PostgreSQL hands out ``seq`` when a row is inserted, not when it commits: without this, a
    transaction could take seq 6, another seq 7 and commit first, and a relay would send 7
    before 6 of the same partition. The lock is held until commit, so the second enqueue into a
    partition takes its seq only after the first one's transaction has ended.
    """
    if tx.dialect == "postgres":
        tx.execute(
            "SELECT pg_advisory_xact_lock(?, hashtext(?))", (PARTITION_LOCK_CLASS, partition_key)
        )


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


def mark_sent(tx: Tx, ids: Sequence[str], attempted: bool, now: float) -> list[str]:
    """Mark ids sent; returns the ids that are unknown."""
    unknown: list[str] = []
    bump = 1 if attempted else 0
    for event_id in ids:
        rows = tx.execute(
            "UPDATE outbox SET sent = 1, sent_at = COALESCE(sent_at, ?), "
            "attempts = attempts + ?, last_attempt_at = CASE WHEN ? = 1 THEN ? "
            "ELSE last_attempt_at END WHERE id = ? RETURNING seq",
            (now, bump, bump, now, event_id),
        )
        if not rows:
            unknown.append(event_id)
    return unknown


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
