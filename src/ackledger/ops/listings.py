"""The outbox's rows as the tables operators read (what is pending, what is quarantined), and
what a quarantine or a requeue did, as the command line and the console both say it."""

from __future__ import annotations

import shlex
from typing import Any

from .._core.timestamps import utc_timestamp


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


def quarantined_text(event_id: str, seq: int, reason: str, source: str) -> str:
    """What ``Outbox.quarantine`` did, and the command that undoes it (``source``: the outbox
    as shown, never its password)."""
    undo = shlex.join(["ackledger", "requeue", event_id, "--source", source])
    return (
        f"quarantined {event_id} (seq {seq}): {reason.strip()}; it is not sent and not "
        f"counted as sent; `{undo}` puts it back"
    )


def requeued_lines(record: dict[str, Any]) -> list[str]:
    """What ``Outbox.requeue`` did: where the event is back, and the reorder it caused."""
    lines = [f"requeued {record['id']} at seq {record['seq']}"]
    if record["overtaken_count"]:
        lines.append(
            f"reorder: {record['overtaken_count']} later event(s) were marked sent while it was "
            f"out: {', '.join(record['overtaken_by'])}"
        )
    else:
        # Said as what the outbox shows: a later event purged since, or one the sink applied
        # whose ACK was lost (not marked), is not seen here.
        lines.append("no later event of this outbox was marked sent while it was out")
    return lines


def refused_table(rows: list[dict[str, Any]]) -> str:
    """A sink's refused messages (``sink.refused.listing``): what each was and why."""
    if not rows:
        return "nothing refused"
    lines = [f"{'no':>6}  {'id':<32} {'refused at':<20}  {'times':>5}  reason"]
    for row in rows:
        at = utc_timestamp(row["refused_at"])
        shown = row["id"] if row["id"] is not None else "(unreadable)"
        lines.append(
            f"{row['refused_no']:>6}  {shown:<32} {at:<20}  {row['refusals']:>5}  {row['reason']}"
        )
    return "\n".join(lines)
