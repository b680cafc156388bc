"""What an inbox keeps, read back: its receipts, its counters, and their retention."""

from __future__ import annotations

import os
from typing import Any

from ..store.database import Database
from .apply import COUNTER_PREFIX
from .retention import DEFAULT_RETENTION_SECONDS, PURGE_CHUNK, OldestReceipt, purge, report

__all__ = ["COUNTER_NAMES", "InboxRecords"]

#: The durable counters ``counters()`` reports; they never go down, whatever is purged.
COUNTER_NAMES = ("applied", "duplicate", "conflict")


class InboxRecords(Database):
    """One named inbox's receipts and counters in its database (``Inbox`` applies events)."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        name: str,
        *,
        synchronous: str = "FULL",
        schema: str | None = None,
    ) -> None:
        self._name = name
        self._oldest = OldestReceipt(name)
        super().__init__(target, synchronous=synchronous, schema=schema)

    @property
    def name(self) -> str:
        """The inbox's name: its receipts are its own, whatever else shares the database."""
        return self._name

    def receipt(self, event_id: str, *, source: str | None = None) -> dict[str, Any] | None:
        """The inbox row of one event (when, how often), or None if it never arrived.
        Without ``source``, the oldest receipt of any source with this id."""
        with self._db.read() as tx:
            found = tx.inbox_receipts(self._name, event_id, source)
        return found[0] if found else None

    def receipts(self, event_id: str) -> list[dict[str, Any]]:
        """Every receipt with this id (one per source), oldest first."""
        with self._db.read() as tx:
            return tx.inbox_receipts(self._name, event_id)

    def counters(self) -> dict[str, int]:
        """Durable totals that never go down: applied, duplicate, conflict (a purge deletes
        receipts, never counts)."""
        with self._db.read() as tx:
            found = tx.counters_read(COUNTER_PREFIX)
        return {name: found.get(name, 0) for name in COUNTER_NAMES}

    def purge(
        self,
        older_than_seconds: float = DEFAULT_RETENTION_SECONDS,
        *,
        chunk: int = PURGE_CHUNK,
        force: bool = False,
    ) -> int:
        """Delete the receipts first received more than ``older_than_seconds`` ago; returns
        how many.

        A re-send that arrives after its receipt is gone is applied again, so the horizon must
        be longer than any event can stay unmarked at its source (docs/postgres.md, "Inbox
        retention"); below one hour it is refused unless ``force``. The counters do not
        change; ``retention()["purged"]`` grows. ``retention.purge_windows`` says how."""
        return purge(self._db, self._name, older_than_seconds, chunk, force)

    def retention(self) -> dict[str, Any]:
        """``purged``: receipts deleted by ``purge`` over the database's life, by any process
        (a durable counter); ``oldest_receipt_age_s``: seconds since the oldest receipt kept
        by the last purge first arrived (before any purge, the first receipt), None for an
        empty inbox. Receipts deleted since by hand, or by a purge that stopped half-way, are
        not seen: the age is then too old, never too young (``retention.OldestReceipt``)."""
        return report(self._db, self._oldest)
