"""Putting events into an outbox before a benchmark starts its clock.

``pending_events`` goes through the product (``Outbox.transaction`` and ``enqueue``), in large
transactions, because what is measured afterwards is the relay, not the accept.
``sent_rows`` is the bench-only bulk insert for the growth benchmark: a million rows that are
already sent would take minutes through ``accept``; written straight into the table they take
seconds, and ``pending()`` and the relay must not care how they got there.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ackledger import Outbox, new_event, warehouse
from ackledger.envelope import canonical_json, content_fingerprint

SKUS = 64
CHUNK = 2_000
#: The CloudEvents source of the bench's events (an outbox stores its own; events may name
#: another).
SOURCE = "urn:ackledger:bench"
#: The generic workload's event type (the sink gets a handler for it: ``bench.handlers``).
GENERIC_TYPE = "bench.order.placed"


#: Makes event ``n`` of a fill whose ids start with ``prefix``.
EventMaker = Callable[[str, int], dict[str, Any]]


def order(prefix: str, number: int) -> dict[str, Any]:
    """The lab's flat order, for ``accept``."""
    return {"id": f"{prefix}-{number}", "sku": f"sku-{number % SKUS}", "qty": 1 + number % 7}


def lab_event(event_id: str, sku: str, qty: int) -> dict[str, Any]:
    return warehouse.event(event_id, sku, qty, source=SOURCE)


def event(prefix: str, number: int) -> dict[str, Any]:
    """The lab order's ``warehouse.stock.added`` event."""
    item = order(prefix, number)
    return lab_event(item["id"], item["sku"], item["qty"])


def generic(prefix: str, number: int) -> dict[str, Any]:
    """A generic event: about 1 KiB of nested ``data`` (lines of an order), partitioned by
    customer."""
    lines = [
        {"sku": f"sku-{(number + line) % SKUS}", "qty": 1 + line, "price": {"amount": 1250 + line,
         "currency": "EUR"}, "note": "gift wrap" if line % 2 else None}
        for line in range(8)
    ]  # fmt: skip
    data = {"order": f"{prefix}-{number}", "customer": {"id": f"c-{number % 97}",
            "tier": "gold"}, "lines": lines, "total": {"amount": 10_000 + number,
            "currency": "EUR"}}  # fmt: skip
    return new_event(
        GENERIC_TYPE, data, source=SOURCE, id=f"{prefix}-{number}",
        partitionkey=f"c-{number % 97}",
    )  # fmt: skip


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
                rows.append(
                    (
                        item["id"], content_fingerprint(item), item["source"], item["type"],
                        item["subject"], item["partitionkey"], item["partitionkey"],
                        canonical_json(item["data"]), canonical_json(item), now, now,
                    )
                )  # fmt: skip
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO ackledger_outbox (id, fingerprint, source, type, subject, "
                "partitionkey, partition_key, data, event, sent, created_at, sent_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
                rows,
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
