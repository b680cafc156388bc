"""The sink's inbox and the reference domain's inventory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core.idempotency import Claim, Outcome
from .claims import claim_all, claim_once
from .counters import CounterQueries
from .executor import Params
from .keys import INBOX

RECEIPT_COLUMNS = ("id", "sku", "qty", "first_received_at", "last_received_at", "receipts")


class InboxQueries(CounterQueries):
    def inbox_claim(
        self, event_id: str, fingerprint: str, *, sku: str, qty: int, now: float, arrival: int
    ) -> Claim:
        """Claim one event id (``keys.INBOX``); its first and last arrival are ``arrival``."""
        return claim_once(
            self, INBOX, (event_id,), fingerprint, (sku, qty, now, now, arrival, arrival)
        )

    def inbox_claim_all(self, rows: Sequence[Params]) -> list[Outcome]:
        """``inbox_claim`` of many distinct ids, in one multi-row INSERT per 64; each row is
        (id, fingerprint, sku, qty, now, now, arrival, arrival). See ``claims.claim_all``."""
        return claim_all(self, INBOX, rows)

    def inbox_reserve_arrivals(self, count: int) -> int:
        """Take ``count`` numbers of the sink's arrival sequence; returns the one before the
        first. The counter row stays locked until the transaction ends, so the numbers follow
        commit order on every backend."""
        last = self.scalar(
            "INSERT INTO counters (name, value) VALUES ('sink.arrival', ?) "
            "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value "
            "RETURNING value",
            (count,),
        )
        return int(last) - count

    def inbox_note_receipt(self, event_id: str, now: float, arrival: int) -> None:
        """Count another arrival of an event that was already there (a duplicate)."""
        self.execute(
            "UPDATE inbox SET receipts = receipts + 1, last_received_at = ?, last_arrival = ? "
            "WHERE id = ?",
            (now, arrival, event_id),
        )

    def inbox_receipt(self, event_id: str) -> dict[str, Any] | None:
        row = self.one(f"SELECT {', '.join(RECEIPT_COLUMNS)} FROM inbox WHERE id = ?", (event_id,))
        return None if row is None else dict(zip(RECEIPT_COLUMNS, row, strict=True))

    def inventory_add(self, added: Mapping[str, int]) -> None:
        """Add ``added[sku]`` to each sku's stock (one statement, run once per sku)."""
        if added:
            self.executemany(
                "INSERT INTO inventory (sku, qty) VALUES (?, ?) "
                "ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty",
                list(added.items()),
            )

    def inventory_stock(self, sku: str) -> int:
        value = self.scalar("SELECT qty FROM inventory WHERE sku = ?", (sku,))
        return 0 if value is None else int(value)
