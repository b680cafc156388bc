"""What is particular to a SQLite ledger file (its counter trigger); the contract itself runs
on every backend in tests/backends/test_ledger.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ackledger import Ledger
from ackledger.store import open_backend
from ackledger.store.base import migrate, schema_versions


def test_a_file_from_before_the_counter_trigger_keeps_counting_from_its_totals(
    ledger_db: Path,
) -> None:
    """Version 5 moved the SQLite counter bumps into a trigger: totals an older release left in
    the file go on growing from where they were, by one per request (not two, not zero)."""
    backend = open_backend(ledger_db, migrate_schema=False)
    try:
        migrate(backend, upto=4)
        with backend.write() as tx:
            tx.executemany(
                "INSERT INTO ackledger_counters (name, value) VALUES (?, ?)",
                [("ledger.attempts", 7), ("ledger.deliveries", 3), ("ledger.duplicates", 4)],
            )
    finally:
        backend.close()
    with Ledger(ledger_db) as ledger:
        assert (5, "0005_ledger_counters") in schema_versions(ledger.backend)
        ledger.request("c", "w", "pod-A")
        ledger.request("c", "w", "pod-B")
        assert ledger.counters() == {
            "attempts": 9, "deliveries": 4, "duplicates": 5, "conflicts": 0,
        }  # fmt: skip
    conn = sqlite3.connect(ledger_db)
    try:
        rows = conn.execute(
            "SELECT name, value FROM ackledger_counters WHERE name LIKE 'ledger.%' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    # One row per counter: SQLite has one writer, nothing to spread.
    assert rows == [("ledger.attempts", 9), ("ledger.deliveries", 4), ("ledger.duplicates", 5)]
