"""What ``verify`` reads back after a schedule: its own events' rows on each side.

Every event of one verify run has an id that starts with the run's tag, so these reads find
that run's rows alone, also in a user's inbox that holds others. (The effect's side is the
lab's own table, read by the lab.)
"""

from __future__ import annotations

from typing import Any

from .executor import Executor


def _like(prefix: str) -> str:
    # The tag is made of letters, digits and '-': nothing in it is a LIKE wildcard.
    return prefix + "%"


class VerifyQueries(Executor):
    def verify_outbox_rows(self, prefix: str) -> list[dict[str, Any]]:
        """The run's outbox rows in seq order: id, partition, seq, sent, quarantined."""
        rows = self.execute(
            "SELECT id, partition_key, seq, sent, quarantined FROM ackledger_outbox "
            "WHERE id LIKE ? ORDER BY seq",
            (_like(prefix),),
        )
        names = ("id", "partition", "seq", "sent", "quarantined")
        return [dict(zip(names, row, strict=True)) for row in rows]

    def verify_arrivals(self, prefix: str) -> dict[str, int]:
        """The sink's first arrival number of each of the run's events it has a receipt of."""
        rows = self.execute(
            "SELECT id, arrival FROM ackledger_inbox WHERE id LIKE ?", (_like(prefix),)
        )
        return {str(event_id): int(arrival or 0) for event_id, arrival in rows}
