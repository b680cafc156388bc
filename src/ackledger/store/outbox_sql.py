"""Outbox queries beyond the idempotent claim (which lives in ``keys.OUTBOX``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Tx
from .inbox_sql import bump_counter, counters

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


def insert_order(tx: Tx, event: dict[str, Any], now: float) -> bool:
    """Insert the order; False if an order with this id already exists."""
    rows = tx.execute(
        "INSERT INTO orders (id, sku, qty, created_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING RETURNING id",
        (event["id"], event["sku"], event["qty"], now),
    )
    return bool(rows)


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


# A mark that arrives for an event an operator quarantined while its send was in flight
# counts the attempt but leaves the event quarantined and unsent: the hold holds (it is not
# counted as sent, stays listed, can be requeued, is never purged), and a requeue re-sends it
# as a duplicate that the inbox absorbs. The partition marks (lease_sql) use it too.
SENT_UNLESS_HELD = (
    "sent = CASE WHEN quarantined = 0 THEN 1 ELSE sent END, "
    "sent_at = CASE WHEN quarantined = 0 THEN COALESCE(sent_at, ?) ELSE sent_at END"
)


def mark_sent(tx: Tx, ids: Sequence[str], attempted: bool, now: float) -> list[str]:
    """Mark ids sent (a batch in one statement); returns the ids that are unknown, in order."""
    bump = 1 if attempted else 0
    found: set[str] = set()
    unique = list(dict.fromkeys(ids))  # an id given twice is one mark and one attempt
    for start in range(0, len(unique), MARK_CHUNK):
        chunk = unique[start : start + MARK_CHUNK]
        marks = ", ".join("?" * len(chunk))
        rows = tx.execute(
            f"UPDATE outbox SET {SENT_UNLESS_HELD}, "
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


def amend_error(tx: Tx, event_id: str, error: str) -> bool:
    """Replace the last error's text without counting another attempt."""
    return bool(
        tx.execute("UPDATE outbox SET last_error = ? WHERE id = ? RETURNING seq", (error, event_id))
    )


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


# --- Operations: quarantine, requeue, statistics, retention (migration 0003) ---------------

QUARANTINED_COLUMNS = (
    "seq", "id", "sku", "qty", "quarantine_reason", "quarantined_at", "attempts", "last_error",
)  # fmt: skip
LOG_COLUMNS = ("seq", "event_id", "kind", "detail", "at")
PURGED_SENT = "outbox.purged_sent"
PURGED_ATTEMPTS = "outbox.purged_attempts"


def event_status(tx: Tx, event_id: str) -> tuple[int, int, int, float | None] | None:
    """(seq, sent, quarantined, quarantined_at) of one event, or None."""
    row = tx.one(
        "SELECT seq, sent, quarantined, quarantined_at FROM outbox WHERE id = ?", (event_id,)
    )
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]), row[3])


def quarantine(tx: Tx, event_id: str, reason: str, now: float) -> int | None:
    """Take a pending event out of pending; returns its seq, or None if it was not pending.

    The state test is in the UPDATE itself, so a concurrent mark cannot slip in between a
    check and the change on either backend.
    """
    seq = tx.scalar(
        "UPDATE outbox SET quarantined = 1, quarantine_reason = ?, quarantined_at = ? "
        "WHERE id = ? AND sent = 0 AND quarantined = 0 RETURNING seq",
        (reason, now, event_id),
    )
    return None if seq is None else int(seq)


def requeue(tx: Tx, event_id: str) -> int | None:
    """Put a quarantined event back into pending; returns its seq, or None if it was not
    quarantined (the state test is in the UPDATE, as in ``quarantine``)."""
    seq = tx.scalar(
        "UPDATE outbox SET quarantined = 0, quarantine_reason = NULL, quarantined_at = NULL "
        "WHERE id = ? AND sent = 0 AND quarantined = 1 RETURNING seq",
        (event_id,),
    )
    return None if seq is None else int(seq)


def sent_after(tx: Tx, seq: int, since: float) -> list[tuple[int, str]]:
    """Later events (higher seq) marked sent at or after ``since``: who overtook ``seq``."""
    rows = tx.execute(
        "SELECT seq, id FROM outbox WHERE seq > ? AND sent = 1 AND sent_at >= ? ORDER BY seq",
        (seq, since),
    )
    return [(int(s), str(i)) for s, i in rows]


def append_log(tx: Tx, event_id: str, kind: str, detail: str, now: float) -> None:
    tx.execute(
        "INSERT INTO outbox_log (event_id, kind, detail, at) VALUES (?, ?, ?, ?)",
        (event_id, kind, detail, now),
    )


def log_rows(tx: Tx, event_id: str) -> list[dict[str, Any]]:
    rows = tx.execute(
        f"SELECT {', '.join(LOG_COLUMNS)} FROM outbox_log WHERE event_id = ? ORDER BY seq",
        (event_id,),
    )
    return [dict(zip(LOG_COLUMNS, row, strict=True)) for row in rows]


def quarantined_rows(tx: Tx) -> list[dict[str, Any]]:
    # Matches the partial index outbox_quarantined.
    rows = tx.execute(
        f"SELECT {', '.join(QUARANTINED_COLUMNS)} FROM outbox "
        "WHERE quarantined = 1 AND sent = 0 ORDER BY seq"
    )
    return [dict(zip(QUARANTINED_COLUMNS, row, strict=True)) for row in rows]


def pending_summary(tx: Tx) -> tuple[int, float | None]:
    """(count, created_at of the first) of the sendable events, read through outbox_pending."""
    count = int(tx.scalar("SELECT COUNT(*) FROM outbox WHERE sent = 0 AND quarantined = 0"))
    oldest = tx.scalar(
        "SELECT created_at FROM outbox WHERE sent = 0 AND quarantined = 0 ORDER BY seq LIMIT 1"
    )
    return count, None if oldest is None else float(oldest)


def totals(tx: Tx) -> tuple[int, int, int]:
    """(sent, quarantined, attempts) over the rows the outbox still holds."""
    sent = int(tx.scalar("SELECT COUNT(*) FROM outbox WHERE sent = 1"))
    quarantined = int(tx.scalar("SELECT COUNT(*) FROM outbox WHERE quarantined = 1 AND sent = 0"))
    attempts = int(tx.scalar("SELECT COALESCE(SUM(attempts), 0) FROM outbox"))
    return sent, quarantined, attempts


def last_unsent_error(tx: Tx) -> dict[str, Any] | None:
    """The latest error of an event that is still not sent (pending or quarantined)."""
    found: list[tuple[Any, ...]] = []
    for state in ("sent = 0 AND quarantined = 0", "quarantined = 1 AND sent = 0"):
        found += tx.execute(
            f"SELECT id, last_error, last_attempt_at FROM outbox WHERE {state} "
            "AND last_error IS NOT NULL ORDER BY last_attempt_at DESC LIMIT 1"
        )
    if not found:
        return None
    event_id, error, at = max(found, key=lambda row: row[2] or 0.0)
    return {"id": event_id, "error": error, "at": at}


def purged_totals(tx: Tx) -> tuple[int, int]:
    """(sent rows, their attempts) that purge has deleted over the database's life."""
    found = counters(tx, "outbox.")
    prefix = len("outbox.")
    return found.get(PURGED_SENT[prefix:], 0), found.get(PURGED_ATTEMPTS[prefix:], 0)


def purge_sent(tx: Tx, cutoff: float) -> int:
    """Delete sent rows whose sent_at is before ``cutoff``; returns how many.

    Their attempts and their number move into durable counters first, so that the totals an
    operator watches do not fall when old rows go.
    """
    where = "WHERE sent = 1 AND sent_at < ?"  # matches the partial index outbox_sent_at
    if tx.dialect == "postgres":
        # Counted from the rows this DELETE removed: two purges at once (two replicas' cron
        # jobs) each count only their own deletions; a count read before the DELETE would
        # let both add the same rows and double the totals (found by review).
        row = tx.one(
            f"WITH gone AS (DELETE FROM outbox {where} RETURNING attempts) "
            "SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM gone",
            (cutoff,),
        )
    else:
        # One writer: nothing changes these rows between the count and the DELETE (SQLite
        # has no DELETE inside WITH).
        row = tx.one(f"SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM outbox {where}", (cutoff,))
    count, attempts = (0, 0) if row is None else (int(row[0]), int(row[1]))
    if count == 0:
        return 0
    if tx.dialect != "postgres":
        tx.execute(f"DELETE FROM outbox {where}", (cutoff,))
    bump_counter(tx, PURGED_SENT, count)
    bump_counter(tx, PURGED_ATTEMPTS, attempts)
    return count
