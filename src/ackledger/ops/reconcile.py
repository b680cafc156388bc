"""Both ends at once: which events the outbox and the sink disagree about, and whether that is
harmless (an ACK lost, the next send finishes it) or an alarm (CONTRACT v2 §10).

Each side is read in chunks in its own index order and every chunk is looked up on the other
side by id. The outbox is read before the sink is asked about it, and the sink before the
outbox is asked about its receipts: a receipt commits before its ACK and an outbox row before
its first send, so a relay running meanwhile can only move events into the harmless classes,
never raise a false alarm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..sink.inbox import DEFAULT_NAME, Inbox
from ..source.outbox import Outbox
from ..store import is_database_url
from ..wire.targets import base_url
from .databases import existing_database, is_url
from .probe import sink_receipt

#: Rows read per query on each side.
CHUNK = 500

#: The classes of disagreement, what each means and whether it is an alarm.
CLASSES: dict[str, tuple[str, bool]] = {
    "applied_not_marked": (
        "applied at the sink, still pending in the outbox: the ACK was lost or the relay "
        "stopped between ACK and mark; harmless, the next send is answered as a duplicate",
        False,
    ),
    "applied_quarantined": (
        "applied at the sink, quarantined in the outbox: requeue it to have it marked",
        False,
    ),
    "marked_without_receipt": (
        "marked sent in the outbox, no receipt at the sink: must never happen inside the "
        "boundary (unless the sink purged the receipt or is not the sink this outbox sends to)",
        True,
    ),
    "refused_at_sink": (
        "refused for good by the sink's consumer (invalid, a conflict, no handler, the "
        "handler's Rejected) and kept in its inbox database: not applied; fix the cause, then "
        "`ackledger refused replay`",
        True,
    ),
    "other_content": (
        "the sink holds the identity with other content: it refuses ours (422)",
        True,
    ),
    "unknown_to_outbox": (
        "a receipt of this outbox's source that the outbox has no row for: sent and purged "
        "from the outbox, or never published here",
        False,
    ),
}


@dataclass
class Finding:
    count: int = 0
    ids: list[str] = field(default_factory=list)

    def add(self, event_id: str, shown: int) -> None:
        self.count += 1
        if len(self.ids) < shown:
            self.ids.append(event_id)


@dataclass
class Tally:
    """What a reconcile run has found so far."""

    max_ids: int
    sources: set[str]
    findings: dict[str, Finding] = field(
        default_factory=lambda: {name: Finding() for name in CLASSES}
    )
    checked: dict[str, int] = field(default_factory=lambda: {"outbox_rows": 0, "receipts": 0})

    def add(self, name: str, event_id: str) -> None:
        self.findings[name].add(event_id, self.max_ids)


def reconcile(
    source: str, sink: str, *, max_ids: int = 20, inbox_name: str = DEFAULT_NAME
) -> dict[str, Any]:
    """The disagreements between the outbox at ``source`` and the sink (its inbox database, of
    the inbox ``inbox_name``, or its service URL, then only the outbox's rows can be checked,
    one request each), with up to ``max_ids`` ids per group."""
    if type(max_ids) is not int or not 0 <= max_ids <= 10_000:
        raise ValueError(f"max_ids: must be an integer from 0 to 10000, got {max_ids!r}")
    with Outbox(source) as outbox:
        tally = Tally(max_ids, {outbox.source})
        if is_url(sink) and not is_database_url(sink):
            where = f"GET {base_url(sink)}/events/{{id}}"
            lookup = _service_lookup(sink)
            _walk_outbox(outbox, lookup, tally)
            receipts_checked = False
        else:
            database = sink if is_database_url(sink) else existing_database(sink, "sink")
            with Inbox(database, name=inbox_name) as inbox:
                where = f"table ackledger_inbox in {inbox.backend.location}"
                _walk_outbox(outbox, _inbox_lookup(inbox), tally, _refused_lookup(inbox))
                _walk_inbox(inbox, outbox, tally)
            receipts_checked = True
        location = outbox.backend.location
    findings, checked = tally.findings, tally.checked
    alarms = sum(findings[name].count for name, (_, alarm) in CLASSES.items() if alarm)
    report: dict[str, Any] = {
        "outbox": location,
        "sink": where,
        "checked": checked,
        "receipts_checked": receipts_checked,
        "classes": {
            name: {
                "count": findings[name].count,
                "ids": findings[name].ids,
                "means": CLASSES[name][0],
                "alarm": CLASSES[name][1],
            }
            for name in CLASSES
        },
        "alarms": alarms,
    }
    if not receipts_checked:
        report["classes"]["unknown_to_outbox"]["count"] = None
    return report


#: Given a chunk of outbox rows, the sink's fingerprint of each identity it holds (or the
#: reason of each identity its consumer refused).
Lookup = Callable[[list[dict[str, Any]]], dict[tuple[str, str], str]]


def _inbox_lookup(inbox: Inbox) -> Lookup:
    def lookup(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
        with inbox.backend.read() as tx:
            return tx.inbox_fingerprints_among(inbox.name, [row["id"] for row in rows])

    return lookup


def _refused_lookup(inbox: Inbox) -> Lookup:
    def lookup(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
        with inbox.backend.read() as tx:
            return tx.refused_among([row["id"] for row in rows])

    return lookup


def _nothing_refused(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """A sink service keeps no refusals: it answers them to the sender, who keeps the event."""
    return {}


def _service_lookup(url: str) -> Lookup:
    def lookup(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
        found = {}
        for row in rows:
            receipt = sink_receipt(url, row["id"], source=row["source"])
            if receipt is not None:
                found[(row["id"], row["source"])] = str(receipt.get("fingerprint"))
        return found

    return lookup


def _walk_outbox(
    outbox: Outbox, lookup: Lookup, tally: Tally, refused: Lookup = _nothing_refused
) -> None:
    after = 0
    while True:
        with outbox.backend.read() as tx:
            rows = tx.outbox_identities(after, CHUNK)
        if not rows:
            return
        after = rows[-1]["seq"]
        tally.checked["outbox_rows"] += len(rows)
        receipts = lookup(rows)
        refusals = refused(rows)
        for row in rows:
            tally.sources.add(row["source"])
            fingerprint = receipts.get((row["id"], row["source"]))
            if (
                fingerprint is not None
                and fingerprint != row["fingerprint"]
                and not _same_lab_event(outbox, row, fingerprint)
            ):
                tally.add("other_content", row["id"])
            elif fingerprint is None:
                if (row["id"], row["source"]) in refusals:
                    tally.add("refused_at_sink", row["id"])
                elif row["sent"]:
                    tally.add("marked_without_receipt", row["id"])
            elif row["quarantined"]:
                tally.add("applied_quarantined", row["id"])
            elif not row["sent"]:
                tally.add("applied_not_marked", row["id"])


def _same_lab_event(outbox: Outbox, row: dict[str, Any], fingerprint: str) -> bool:
    """A v1 receipt holds v1's fingerprint of the same lab event: no other content."""
    from .. import warehouse

    event = outbox.event(row["id"])
    return event is not None and warehouse.v1_fingerprint(event) == fingerprint


def _walk_inbox(inbox: Inbox, outbox: Outbox, tally: Tally) -> None:
    mine = set(tally.sources)
    after: tuple[str, str] | None = None
    while True:
        with inbox.backend.read() as tx:
            keys = tx.inbox_identities(inbox.name, after, CHUNK)
        if not keys:
            return
        after = keys[-1]
        ours = [key for key in keys if key[1] in mine]
        tally.checked["receipts"] += len(ours)
        with outbox.backend.read() as tx:
            present = tx.outbox_ids_among(sorted({event_id for event_id, _ in ours}))
        for key in ours:
            if key not in present:
                tally.add("unknown_to_outbox", key[0])


def reconcile_text(report: dict[str, Any]) -> str:
    """The report as the command prints it."""
    checked = report["checked"]
    lines = [
        f"reconcile {report['outbox']} against {report['sink']}",
        f"checked {checked['outbox_rows']} outbox row(s)"
        + (f" and {checked['receipts']} receipt(s)" if report["receipts_checked"] else ""),
    ]
    for name, found in report["classes"].items():
        count = (
            "not checked (needs the sink's database)" if found["count"] is None else found["count"]
        )
        flag = "ALARM " if found["alarm"] and found["count"] else ""
        lines.append(f"{flag}{name}: {count}")
        lines.append(f"    {found['means']}")
        if found["ids"]:
            more = (
                ""
                if found["count"] <= len(found["ids"])
                else f" (and {found['count'] - len(found['ids'])} more)"
            )
            lines.append(f"    ids: {', '.join(found['ids'])}{more}")
    lines.append(
        "verdict: " + ("consistent" if report["alarms"] == 0 else f"{report['alarms']} alarm(s)")
    )
    return "\n".join(lines)
