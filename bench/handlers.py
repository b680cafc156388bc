"""The bench sink's handler for the generic workload (``serve sink --handlers
bench.handlers:HANDLERS``): one insert of the order's total, as a user's handler would write
its own row, in the inbox's transaction."""

from __future__ import annotations

from typing import Any

from .fill import GENERIC_TYPE

_made: set[int] = set()


def record_order(tx: Any, event: dict[str, Any]) -> None:
    # The table is the handler's own; made on the first event of each transaction object's
    # database (one sink, one database: once per process in practice).
    if not _made:
        tx.execute(
            "CREATE TABLE IF NOT EXISTS bench_orders (id TEXT PRIMARY KEY, customer TEXT, "
            "total INTEGER)"
        )
        _made.add(1)
    data = event["data"]
    tx.execute(
        "INSERT INTO bench_orders (id, customer, total) VALUES (?, ?, ?)",
        (data["order"], data["customer"]["id"], data["total"]["amount"]),
    )


HANDLERS = {GENERIC_TYPE: record_order}
