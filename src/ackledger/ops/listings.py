"""The outbox's rows as the tables operators read: what is pending, what is quarantined."""

from __future__ import annotations

from typing import Any

from .timestamps import utc_timestamp


def pending_table(items: list[dict[str, Any]]) -> str:
    """``Outbox.pending`` in seq order, one line an event."""
    if not items:
        return "nothing pending"
    lines = [f"{'seq':>8}  {'id':<32} {'type':<32} source"]
    for item in items:
        lines.append(f"{item['seq']:>8}  {item['id']:<32} {item['type']:<32} {item['source']}")
    return "\n".join(lines)


def quarantined_table(rows: list[dict[str, Any]]) -> str:
    """``Outbox.quarantined`` with when and why each event was held out."""
    if not rows:
        return "nothing quarantined"
    lines = [f"{'seq':>8}  {'id':<32} {'quarantined at':<20}  reason"]
    for row in rows:
        at = utc_timestamp(row["quarantined_at"])
        lines.append(f"{row['seq']:>8}  {row['id']:<32} {at:<20}  {row['reason']}")
    return "\n".join(lines)
