"""What ``reconcile`` reads: both sides' identities in chunks, each side in its own index order.

The outbox and the inbox are separate databases, possibly of two kinds, so their rows are
never merged by one ordering: each side is walked by its own key (the outbox by ``seq``, the
inbox by its primary key ``(id, source)``) and every chunk is looked up on the other side by
id, which both index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .executor import Executor


def _marks(count: int) -> str:
    return ", ".join("?" * count)


class ReconcileQueries(Executor):
    def outbox_identities(self, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """Outbox rows after ``after_seq`` in seq order: seq, id, source, fingerprint, sent,
        quarantined."""
        rows = self.execute(
            "SELECT seq, id, source, fingerprint, sent, quarantined FROM ackledger_outbox "
            "WHERE seq > ? ORDER BY seq LIMIT ?",
            (after_seq, limit),
        )
        names = ("seq", "id", "source", "fingerprint", "sent", "quarantined")
        return [dict(zip(names, row, strict=True)) for row in rows]

    def outbox_ids_among(self, ids: Sequence[str]) -> set[tuple[str, str]]:
        """The (id, source) of the outbox rows whose id is one of ``ids``."""
        if not ids:
            return set()
        rows = self.execute(
            f"SELECT id, source FROM ackledger_outbox WHERE id IN ({_marks(len(ids))})", tuple(ids)
        )
        return {(str(event_id), str(source)) for event_id, source in rows}

    def inbox_identities(
        self, name: str, after: tuple[str, str] | None, limit: int
    ) -> list[tuple[str, str]]:
        """The inbox ``name``'s receipts after ``after`` = (id, source) in the inbox's key
        order, as (id, source)."""
        if after is None:
            rows = self.execute(
                "SELECT id, source FROM ackledger_inbox WHERE name = ? ORDER BY id, source LIMIT ?",
                (name, limit),
            )
        else:
            rows = self.execute(
                "SELECT id, source FROM ackledger_inbox WHERE name = ? AND (id, source) > (?, ?) "
                "ORDER BY id, source LIMIT ?",
                (name, *after, limit),
            )
        return [(str(event_id), str(source)) for event_id, source in rows]

    def inbox_fingerprints_among(self, name: str, ids: Sequence[str]) -> dict[tuple[str, str], str]:
        """The fingerprint of every receipt of the inbox ``name`` whose id is one of ``ids``,
        by (id, source)."""
        if not ids:
            return {}
        rows = self.execute(
            "SELECT id, source, fingerprint FROM ackledger_inbox "
            f"WHERE id IN ({_marks(len(ids))}) AND name = ?",
            (*ids, name),
        )
        return {(str(event_id), str(source)): str(fp) for event_id, source, fp in rows}
