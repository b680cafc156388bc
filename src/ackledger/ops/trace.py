"""The evidence for one event, stage by stage: which state do we have proof of?

Orders, the outbox row, the sink's inbox receipt, the ACK and the sent mark are separate
observations; one does not prove the next. ``trace`` reads each from where it lives and says
what was seen, where, and what cannot be known from stored state (the ACK is never stored: it
can only be inferred from the mark, and its loss only from a receipt without a mark).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import AckledgerError
from ..event import check_identifier
from ..sink.inbox import Inbox
from ..source.outbox import Outbox
from ..store import is_postgres, without_password
from .databases import existing_database, is_url
from .probe import base_url, sink_receipt
from .timestamps import utc_timestamp

YES, NO, UNKNOWN, INFERRED = "yes", "no", "unknown", "inferred"


@dataclass(frozen=True)
class Stage:
    stage: str
    seen: str  #: yes / no / unknown / inferred
    state: str
    where: str
    detail: str


def read_receipt(
    event_id: str,
    sink: str,
    source: str | None = None,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """(receipt or None, where it was looked for): the receipt of the event's identity when
    its ``source`` is known; raises OSError/AckledgerError if the sink cannot be asked."""
    if is_postgres(sink):
        with Inbox(sink) as inbox:
            found = inbox.receipt(event_id, source=source)
            return found, f"table inbox in {inbox.backend.location}"
    if is_url(sink):
        found = sink_receipt(
            base_url(sink), event_id, source=source, timeout=timeout, allowed_hosts=allowed_hosts
        )
        return found, f"GET {base_url(sink)}/events/{event_id}"
    with Inbox(existing_database(sink, "sink")) as inbox:
        return inbox.receipt(event_id, source=source), f"table inbox in {sink}"


def trace(
    event_id: str,
    source: str,
    sink: str,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Every stage of one event; ``{"id", "stages": [...], "verdict", "known",
    "sink_readable"}``: ``known`` is false when no stage has a trace of the id."""
    check_identifier(event_id, "event_id", 128)
    with Outbox(source) as outbox:
        source_shown = outbox.backend.location
        order = outbox.order(event_id)
        row = outbox.event(event_id)
        history = outbox.history(event_id)
    try:
        receipt, sink_where = read_receipt(
            event_id,
            sink,
            None if row is None else row["source"],
            timeout=timeout,
            allowed_hosts=allowed_hosts,
        )
        sink_error = None
    except (OSError, AckledgerError) as exc:
        receipt, sink_where, sink_error = (
            None,
            without_password(sink),
            f"{type(exc).__name__}: {exc}",
        )
    # Equal content has an equal fingerprint at both ends (a v1 database's rows kept v1's
    # on both sides); without the outbox row (purged) there is nothing to compare.
    conflict = (
        receipt is not None and row is not None and receipt.get("fingerprint") != row["fingerprint"]
    )
    stages = [
        _accepted_stage(order, source_shown),
        _outbox_stage(row, history, source_shown),
        _sink_stage(receipt, sink_where, sink_error, conflict),
        _ack_stage(row, receipt, sink_error, conflict),
        _sent_stage(row, source_shown),
    ]
    return {
        "id": event_id,
        "stages": [asdict(stage) for stage in stages],
        "verdict": _verdict(order, row, receipt, sink_error, conflict),
        "known": not (order is None and row is None and receipt is None),
        "sink_readable": sink_error is None,
    }


def trace_text(report: dict[str, Any]) -> str:
    """A ``trace`` report as the table the command prints."""
    lines = [f"trace of {report['id']}", f"{'stage':<9} {'seen':<9} {'state':<28} where"]
    for stage in report["stages"]:
        lines.append(
            f"{stage['stage']:<9} {stage['seen']:<9} {stage['state']:<28} {stage['where']}"
        )
        lines.append(f"{'':<19} {stage['detail']}")
    lines.append(f"verdict: {report['verdict']}")
    return "\n".join(lines)


def _accepted_stage(order: dict[str, Any] | None, source: str) -> Stage:
    where = f"table orders in {source}"
    if order is None:
        return Stage(
            "accepted", NO, "no order row", where,
            "not a lab order: published with publish() or Outbox.transaction() (which write "
            "your own business rows, not orders), or never accepted here",
        )  # fmt: skip
    detail = f"sku={order['sku']} qty={order['qty']} at {utc_timestamp(order['created_at'])}"
    return Stage("accepted", YES, "order row", where, detail)


def _outbox_stage(row: dict[str, Any] | None, history: list[dict[str, Any]], source: str) -> Stage:
    where = f"table outbox in {source}"
    if row is None:
        return Stage(
            "outbox", NO, "no outbox row", where,
            "never enqueued, or purged after it was sent (purge keeps no row)",
        )  # fmt: skip
    state = "sent" if row["sent"] else "quarantined" if row["quarantined"] else "pending"
    parts = [f"seq={row['seq']}", f"attempts={row['attempts']}"]
    if row["last_error"]:
        parts.append(f"last error at {utc_timestamp(row['last_attempt_at'])}: {row['last_error']}")
    if state == "quarantined":
        parts.append(
            f"quarantined at {utc_timestamp(row['quarantined_at'])}: {row['quarantine_reason']} "
            "(not sent, not counted as sent)"
        )
    for entry in history:
        detail = entry["detail"]
        if entry["kind"] == "requeued":
            parts.append(
                f"requeued at {utc_timestamp(entry['at'])}; {detail['overtaken_count']} later "
                "event(s) were marked sent while it was out: "
                f"{', '.join(detail['overtaken_by']) or 'none'}"
            )
        elif entry["kind"] == "quarantined" and state != "quarantined":
            parts.append(f"was quarantined at {utc_timestamp(entry['at'])}: {detail.get('reason')}")
    return Stage("outbox", YES, state, where, "; ".join(parts))


def _sink_stage(
    receipt: dict[str, Any] | None,
    where: str,
    error: str | None,
    conflict: bool,
) -> Stage:
    if error is not None:
        return Stage("sink", UNKNOWN, "sink not readable", where, f"cannot tell: {error}")
    if receipt is None:
        return Stage("sink", NO, "no inbox receipt", where, "the sink has not applied this id")
    receipts = int(receipt.get("receipts") or 1)
    detail = (
        f"applied at {utc_timestamp(receipt.get('first_received_at'))}; received {receipts} time(s)"
        + (f" ({receipts - 1} re-send(s) absorbed as duplicates)" if receipts > 1 else "")
    )
    if conflict:
        detail += (
            "; CONFLICT: the sink holds this identity with other content (fingerprint "
            f"{str(receipt.get('fingerprint'))[:12]}...), so it refuses ours (422)"
        )
        return Stage("sink", YES, "receipt with other content", where, detail)
    return Stage("sink", YES, "inbox receipt", where, detail)


def _ack_stage(
    row: dict[str, Any] | None, receipt: dict[str, Any] | None, error: str | None, conflict: bool
) -> Stage:
    where = "not stored anywhere (an ACK lives only in the relay's memory)"
    if row is not None and row["sent"]:
        return Stage(
            "ack", INFERRED, "an exact ACK arrived", where,
            "inferred from the sent mark, which is written only after an exact ACK",
        )  # fmt: skip
    if error is not None:
        return Stage("ack", UNKNOWN, "cannot be known", where, "the sink could not be read")
    if receipt is not None and conflict:
        return Stage(
            "ack", NO, "refused", where,
            "the sink holds this id with other content and answers every send of ours with "
            "422; re-sending cannot finish it (quarantine it, or correct one side)",
        )  # fmt: skip
    if receipt is not None and row is None:
        return Stage(
            "ack", UNKNOWN, "cannot be known", where,
            "the sink applied it, and this outbox has no row that could carry a mark",
        )  # fmt: skip
    if receipt is not None and row is not None and row["quarantined"]:
        return Stage(
            "ack", UNKNOWN, "cannot be known", where,
            "the sink applied it but the outbox has no mark: the ACK was lost, the relay "
            "stopped before the mark, or the quarantine landed while the send was in flight "
            "(then its ACK was not allowed to mark it); a requeue re-sends it and the inbox "
            "answers a duplicate ACK",
        )  # fmt: skip
    if receipt is not None:
        return Stage(
            "ack", UNKNOWN, "cannot be known", where,
            "the sink applied it but the outbox has no mark: the ACK was lost on the way back, "
            "or the relay stopped between ACK and mark; the next send completes it (the inbox "
            "answers a duplicate ACK)",
        )  # fmt: skip
    return Stage(
        "ack", NO, "none possible", where,
        "the sink has no receipt, and it acknowledges only what it has committed",
    )  # fmt: skip


def _sent_stage(row: dict[str, Any] | None, source: str) -> Stage:
    where = f"outbox.sent in {source}"
    if row is None:
        return Stage("sent", UNKNOWN, "no row", where, "no outbox row to carry a mark")
    if row["sent"]:
        return Stage(
            "sent", YES, "marked sent", where, f"sent = 1 at {utc_timestamp(row['sent_at'])}"
        )
    if row["quarantined"]:
        return Stage(
            "sent",
            NO,
            "not marked",
            where,
            "quarantined: the relay does not send it until requeued",
        )
    return Stage("sent", NO, "not marked", where, "sent = 0: the relay will send it (again)")


def _verdict(
    order: dict[str, Any] | None,
    row: dict[str, Any] | None,
    receipt: dict[str, Any] | None,
    sink_error: str | None,
    conflict: bool,
) -> str:
    if row is None:
        if order is None and receipt is None:
            return "unknown here: no order, no outbox row, no receipt"
        if receipt is not None:
            return (
                "at the sink; this outbox has no row for it (purged after it was sent, or "
                "never in this outbox)"
            )
        return "accepted, but the outbox holds no row (purged, or never enqueued)"
    if row["sent"]:
        return "delivered and marked sent"
    if row["quarantined"]:
        if sink_error is not None:
            return (
                "quarantined; whether the sink has it cannot be told (the sink could not be read)"
            )
        if receipt is not None and not conflict:
            return (
                "quarantined, yet the sink has applied it (its ACK was lost, or the quarantine "
                "landed while it was in flight): requeue it to have it marked (the re-send is "
                "absorbed as a duplicate)"
            )
        return "quarantined: NOT delivered; fix the cause, then requeue it"
    if sink_error is not None:
        return "pending; the sink could not be read"
    if conflict:
        return "pending, and the sink holds this id with other content: it will be refused"
    if receipt is not None:
        return "at the sink but not marked: it will be re-sent and absorbed as a duplicate"
    return "pending: not yet at the sink"
