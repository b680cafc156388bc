"""What is particular to a SQLite ledger file; the contract itself runs on every backend in
tests/backends/test_ledger.py."""

from __future__ import annotations

from pathlib import Path

from ackledger import Ledger


def test_reopening_the_file_keeps_every_number(ledger_db: Path) -> None:
    with Ledger(ledger_db) as first:
        numbers = {w: first.request("c", w, "pod-A")["delivery_no"] for w in ("w1", "w2", "w3")}
    with Ledger(ledger_db, synchronous="NORMAL") as again:
        for work_id, number in numbers.items():
            answer = again.request("c", work_id, "pod-B")
            assert answer == {"delivery_no": number, "duplicate": True, "attempt": 2}
        fresh = again.request("c", "w4", "pod-B")["delivery_no"]
    assert fresh > max(numbers.values())
