"""The sink's inbox and the reference domain's inventory."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.idempotency import Claim, Outcome
from .claims import claim_all, claim_once
from .counters import CounterQueries
from .executor import Params
from .keys import INBOX, MANY

RECEIPT_COLUMNS = (
    "source", "id", "type", "fingerprint", "first_received_at", "last_received_at", "receipts",
)  # fmt: skip


#: The durable count of receipts that retention deleted (``Inbox.purge``, any process).
PURGED = "sink.purged"

# Oldest first through the inbox_first_received index (migration 0009), at most a chunk: on
# SQLite the one writer's lock, on PostgreSQL the rows' locks, are held for one chunk only.
# Counted from what this DELETE removed, so two purges at once never count a receipt twice.
_PURGE_CHUNK = (
    "DELETE FROM inbox WHERE (id, source) IN (SELECT id, source FROM inbox "
    "WHERE first_received_at < ? ORDER BY first_received_at LIMIT ?) RETURNING 1"
)

#: The reference handler's one statement (``warehouse.apply``): add to a sku's stock.
INVENTORY_ADD = (
    "INSERT INTO inventory (sku, qty) VALUES (?, ?) "
    "ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty"
)


# Folding a group's outcome counts into this upsert was tried and dropped: a two-row upsert
# with RETURNING costs SQLite more than this one and a plain upsert after it (5.8 against
# 3.1 + 1.3 us), RETURNING being most of a row's cost (bench/CHANGES.md, item 36).
_RESERVE = (
    "INSERT INTO counters (name, value) VALUES ('sink.arrival', ?) "
    "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value "
    "RETURNING value"
)


@functools.lru_cache(maxsize=MANY)
def _inventory_add_sql(count: int) -> str:
    # One multi-row upsert; the skus of one call are distinct (a mapping's keys), as
    # PostgreSQL needs of the rows of one ON CONFLICT DO UPDATE.
    return (
        "INSERT INTO inventory (sku, qty) VALUES "
        + ", ".join(["(?, ?)"] * count)
        + " ON CONFLICT (sku) DO UPDATE SET qty = inventory.qty + excluded.qty"
    )


class InboxQueries(CounterQueries):
    def inbox_claim(
        self, source: str, event_id: str, fingerprint: str, *, type: str, now: float, arrival: int
    ) -> Claim:
        """Claim one event's identity (``keys.INBOX``); its first and last arrival are
        ``arrival``."""
        return claim_once(
            self, INBOX, (source, event_id), fingerprint, (type, now, now, arrival, arrival)
        )

    def inbox_claim_all(self, rows: Sequence[Params]) -> list[Outcome]:
        """``inbox_claim`` of many distinct identities, in one multi-row INSERT per 64; each
        row is (source, id, fingerprint, type, now, now, arrival, arrival). See
        ``claims.claim_all``."""
        return claim_all(self, INBOX, rows)

    def inbox_fingerprint(self, source: str, event_id: str) -> str | None:
        found = self.scalar(
            "SELECT fingerprint FROM inbox WHERE source = ? AND id = ?", (source, event_id)
        )
        return None if found is None else str(found)

    def inbox_reserve_arrivals(self, count: int) -> int:
        """Take ``count`` numbers of the sink's arrival sequence; returns the one before the
        first. The counter row stays locked until the transaction ends, so the numbers follow
        commit order on every backend."""
        return int(self.scalar(_RESERVE, (count,))) - count

    def inbox_note_receipt(self, source: str, event_id: str, now: float, arrival: int) -> None:
        """Count another arrival of an event that was already there (a duplicate)."""
        self.execute(
            "UPDATE inbox SET receipts = receipts + 1, last_received_at = ?, last_arrival = ? "
            "WHERE source = ? AND id = ?",
            (now, arrival, source, event_id),
        )

    def inbox_receipts(self, event_id: str, source: str | None = None) -> list[dict[str, Any]]:
        """The receipts of events with this id (of this source, if given), oldest first."""
        columns = ", ".join(RECEIPT_COLUMNS)
        if source is None:
            rows = self.execute(
                f"SELECT {columns} FROM inbox WHERE id = ? ORDER BY first_received_at, source",
                (event_id,),
            )
        else:
            rows = self.execute(
                f"SELECT {columns} FROM inbox WHERE source = ? AND id = ?", (source, event_id)
            )
        return [dict(zip(RECEIPT_COLUMNS, row, strict=True)) for row in rows]

    def inbox_purge_chunk(self, cutoff: float, limit: int) -> int:
        """Delete up to ``limit`` receipts first received before ``cutoff``, oldest first, and
        add them to the durable ``PURGED`` counter; returns how many."""
        gone = len(self.execute(_PURGE_CHUNK, (cutoff, limit)))
        if gone:
            self.counter_bump(PURGED, gone)
        return gone

    def inbox_oldest_receipt(self) -> float | None:
        """When the oldest receipt still kept first arrived, or None for an empty inbox."""
        found = self.scalar("SELECT MIN(first_received_at) FROM inbox")
        return None if found is None else float(found)

    def inventory_add(self, added: Mapping[str, int]) -> None:
        """Add ``added[sku]`` to each sku's stock: one statement for up to 64 skus."""
        items = list(added.items())
        for start in range(0, len(items), MANY):
            chunk = items[start : start + MANY]
            self.execute(
                _inventory_add_sql(len(chunk)), tuple(itertools.chain.from_iterable(chunk))
            )

    # A user's handler runs inside a savepoint when it may fail on its own: its failure then
    # undoes its claim and its writes, and nothing else of the transaction.
    def handler_savepoint(self) -> None:
        self.execute("SAVEPOINT ackledger_handler")

    def handler_release(self) -> None:
        self.execute("RELEASE SAVEPOINT ackledger_handler")

    def handler_undo(self) -> None:
        self.execute("ROLLBACK TO SAVEPOINT ackledger_handler")
        self.execute("RELEASE SAVEPOINT ackledger_handler")

    def inventory_stock(self, sku: str) -> int:
        value = self.scalar("SELECT qty FROM inventory WHERE sku = ?", (sku,))
        return 0 if value is None else int(value)
