"""Putting events into an outbox before a benchmark starts its clock.

``pending_events`` goes through the product (``Outbox.transaction`` and ``enqueue``), in large
transactions, because what is measured afterwards is the relay, not the accept.
``sent_rows`` is the bench-only bulk insert for the growth benchmark: a million rows that are
already sent would take minutes through ``accept``; written straight into the table they take
seconds, and ``pending()`` and the relay must not care how they got there.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ackledger import Outbox
from ackledger.event import canonical_json

SKUS = 64
CHUNK = 2_000


#: Makes event ``n`` of a fill whose ids start with ``prefix``.
EventMaker = Callable[[str, int], dict[str, Any]]


def event(prefix: str, number: int) -> dict[str, Any]:
    return {"id": f"{prefix}-{number}", "sku": f"sku-{number % SKUS}", "qty": 1 + number % 7}


def pending_events(target: Path | str, prefix: str, count: int, make: EventMaker = event) -> None:
    """``count`` pending events ``make(prefix, n)`` in an outbox file or PostgreSQL URL."""
    # NORMAL only for the filling: the relay that is measured later opens the file with FULL
    # (synchronous is a property of the connection, not of the file).
    with Outbox(target, synchronous="NORMAL") as outbox:
        for start in range(0, count, CHUNK):
            with outbox.transaction() as tx:
                for number in range(start, min(count, start + CHUNK)):
                    tx.enqueue(make(prefix, number))


def sent_rows(path: Path, prefix: str, count: int) -> None:
    """Append ``count`` already-sent rows to the outbox table of ``path`` (schema must exist)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        now = time.time()
        for start in range(0, count, 50_000):
            rows = []
            for number in range(start, min(count, start + 50_000)):
                item = event(prefix, number)
                digest = hashlib.sha256(canonical_json(item).encode()).hexdigest()
                rows.append((item["id"], item["sku"], item["qty"], digest, item["sku"], now, now))
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO outbox (id, sku, qty, fingerprint, partition_key, sent, created_at,"
                " sent_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?)",
                rows,
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
