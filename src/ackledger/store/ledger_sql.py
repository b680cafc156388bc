"""Ledger queries beyond the idempotent claim of a business key (``keys.DELIVERIES``)."""

from __future__ import annotations

from typing import Any

from .base import Tx
from .inbox_sql import bump_spread_counter, counters

__all__ = [
    "ATTEMPT_COLUMNS",
    "DELIVERY_COLUMNS",
    "attempts",
    "bump_spread_counter",
    "count_attempts",
    "counters",
    "deliveries",
    "insert_attempt",
    "insert_control_delivery",
    "lock_key",
    "purge_idle_keys",
]

DELIVERY_COLUMNS = (
    "delivery_no", "case_id", "work_id", "mode", "pod_uid", "fingerprint", "created_at",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "attempt_no", "case_id", "work_id", "pod_uid", "mode", "delivery_no", "outcome", "at",
)  # fmt: skip


#: The first key of the advisory locks that number the attempts of one key (PostgreSQL).
KEY_LOCK_CLASS = 0x6C646B79  # "ldky"


def lock_key(tx: Tx, case_id: str, work_id: str) -> None:
    """Make the requests for one key take turns from here to their commit (PostgreSQL; SQLite
    has one writer anyway), so that each one counts the attempts committed before it and the
    attempt numbers of a key are 1, 2, 3... Requests for other keys do not wait (a hash
    collision only makes two keys share a turn). The caller claims the key before this: the
    claim is its own guarantee and needs no lock.
    """
    if tx.dialect == "postgres":
        tx.execute(
            "SELECT pg_advisory_xact_lock(?, hashtext(?))",
            (KEY_LOCK_CLASS, f"{case_id}/{work_id}"),  # "/" is in no key: no two keys join
        )


def insert_control_delivery(
    tx: Tx, *, case_id: str, work_id: str, fingerprint: str, pod_uid: str, now: float
) -> int:
    """The comparison group: a plain insert, no key is looked up, every call is a delivery."""
    return int(
        tx.scalar(
            "INSERT INTO deliveries (case_id, work_id, fingerprint, mode, pod_uid, created_at) "
            "VALUES (?, ?, ?, 'control', ?, ?) RETURNING delivery_no",
            (case_id, work_id, fingerprint, pod_uid, now),
        )
    )


def insert_attempt(
    tx: Tx,
    *,
    case_id: str,
    work_id: str,
    pod_uid: str,
    mode: str,
    delivery_no: int | None,
    outcome: str,
    fingerprint: str,
    now: float,
) -> None:
    tx.execute(
        "INSERT INTO attempts "
        "(case_id, work_id, pod_uid, mode, delivery_no, outcome, fingerprint, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (case_id, work_id, pod_uid, mode, delivery_no, outcome, fingerprint, now),
    )


def count_attempts(tx: Tx, case_id: str, work_id: str) -> int:
    return int(
        tx.scalar(
            "SELECT COUNT(*) FROM attempts WHERE case_id = ? AND work_id = ?", (case_id, work_id)
        )
    )


def _rows(
    tx: Tx, table: str, columns: tuple[str, ...], order: str, case_id: str | None
) -> list[dict[str, Any]]:
    select = f"SELECT {', '.join(columns)} FROM {table}"
    if case_id is None:
        rows = tx.execute(f"{select} ORDER BY {order}")
    else:
        rows = tx.execute(f"{select} WHERE case_id = ? ORDER BY {order}", (case_id,))
    return [dict(zip(columns, row, strict=True)) for row in rows]


def deliveries(tx: Tx, case_id: str | None) -> list[dict[str, Any]]:
    return _rows(tx, "deliveries", DELIVERY_COLUMNS, "delivery_no", case_id)


def attempts(tx: Tx, case_id: str | None) -> list[dict[str, Any]]:
    return _rows(tx, "attempts", ATTEMPT_COLUMNS, "attempt_no", case_id)


def purge_idle_keys(tx: Tx, cutoff: float) -> tuple[int, int]:
    """Forget every key with no attempt since ``cutoff``: all its attempts, then its deliveries.

    A key goes as a whole, never a part of its history, so a live key keeps its delivery and
    its attempt count. Every delivery is created together with the attempt that refers to it,
    so once a key's attempts are gone, a delivery nobody refers to belongs to a forgotten key.
    Returns (deliveries, attempts) removed.
    """
    gone_attempts = tx.execute(
        "DELETE FROM attempts WHERE at < ? AND NOT EXISTS ("
        "SELECT 1 FROM attempts AS recent WHERE recent.case_id = attempts.case_id "
        "AND recent.work_id = attempts.work_id AND recent.at >= ?) RETURNING attempt_no",
        (cutoff, cutoff),
    )
    gone_deliveries = tx.execute(
        "DELETE FROM deliveries WHERE NOT EXISTS ("
        "SELECT 1 FROM attempts WHERE attempts.delivery_no = deliveries.delivery_no) "
        "RETURNING delivery_no"
    )
    return len(gone_deliveries), len(gone_attempts)
