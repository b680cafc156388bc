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

from .._core.timestamps import utc_timestamp
from ..envelope import check_event_id
from ..errors import AckledgerError
from ..relay.leases import lease_words
from ..sink.inbox import DEFAULT_NAME, Inbox
from ..source.outbox import Outbox
from ..store import is_database_url, without_password
from ..warehouse import TYPE as LAB_TYPE
from ..wire.targets import base_url
from ..wire.token import Token
from .ack_kinds import BROKERS, target_for
from .databases import existing_database, is_url
from .probe import sink_receipt

YES, NO, UNKNOWN, INFERRED = "yes", "no", "unknown", "inferred"


@dataclass(frozen=True)
class SinkSeen:
    """What asking the sink (or the consumer's inbox) found."""

    asked: bool
    receipt: dict[str, Any] | None
    where: str
    error: str | None
    #: The sink holds this identity with other content.
    conflict: bool
    #: The consumer refused it for good and kept it (``ackledger_refused``), newest refusal.
    refused: dict[str, Any] | None = None


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
    token: Token | None = None,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    inbox_name: str = DEFAULT_NAME,
) -> tuple[dict[str, Any] | None, str]:
    """(receipt or None, where it was looked for): the receipt of the event's identity when
    its ``source`` is known (of the inbox ``inbox_name``, in an inbox database); raises
    OSError/AckledgerError if the sink cannot be asked."""
    if is_database_url(sink):
        with Inbox(sink, name=inbox_name) as inbox:
            found = inbox.receipt(event_id, source=source)
            return found, f"table ackledger_inbox in {inbox.backend.location}"
    if is_url(sink):
        found = sink_receipt(
            sink, event_id, source=source, timeout=timeout,
            allowed_hosts=allowed_hosts, token=token,
        )  # fmt: skip
        return found, f"GET {base_url(sink)}/events/{event_id}"
    with Inbox(existing_database(sink, "sink"), name=inbox_name) as inbox:
        return inbox.receipt(event_id, source=source), f"table ackledger_inbox in {sink}"


def read_refused(event_id: str, sink: str, source: str | None) -> dict[str, Any] | None:
    """The newest refusal of the event kept in the inbox database ``sink`` (a service URL
    keeps none: the sink answers its refusals to the sender, who keeps the event)."""
    if is_url(sink) and not is_database_url(sink):
        return None
    with Inbox(sink if is_database_url(sink) else existing_database(sink, "sink")) as inbox:
        with inbox.backend.read() as tx:
            found = tx.refused_of(event_id, source)
        location = inbox.backend.location
    if not found:
        return None
    return {**found[-1], "where": f"table ackledger_refused in {location}", "db": location}


def trace(
    event_id: str,
    source: str,
    sink: str | None = None,
    token: Token | None = None,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    inbox_name: str = DEFAULT_NAME,
) -> dict[str, Any]:
    """Every stage of one event; ``{"id", "stages": [...], "via", "verdict", "known",
    "sink_readable"}``: ``known`` is false when no stage has a trace of the id.

    ``sink`` is where the event is applied: a sink service's URL, or the inbox database of a
    sink or of a broker's consumer (its inbox ``inbox_name``); without it the sink's stage is
    not asked. ``via`` is the
    relay target behind the outbox's state (see ``ops.ack_kinds``), or None."""
    check_event_id(event_id, "event_id")
    with Outbox(source) as outbox:
        source_shown = outbox.backend.location
        order = outbox.order(event_id)
        row = outbox.event(event_id)
        history = outbox.history(event_id)
        via = target_for(outbox.targets(), row)
        held = None if row is None or row["sent"] else outbox.held_by_lease(event_id)
    receipt, sink_where, sink_error = None, "no --sink given", None
    refused = None
    if sink is not None:
        try:
            receipt, sink_where = read_receipt(
                event_id, sink, None if row is None else row["source"], token,
                timeout=timeout, allowed_hosts=allowed_hosts, inbox_name=inbox_name,
            )  # fmt: skip
            if receipt is None:
                refused = read_refused(event_id, sink, None if row is None else row["source"])
        except (OSError, AckledgerError) as exc:
            sink_where, sink_error = without_password(sink), f"{type(exc).__name__}: {exc}"
    broker = via is not None and via["kind"] in BROKERS
    # Equal content has an equal fingerprint at both ends (a v1 database's rows kept v1's
    # on both sides); without the outbox row (purged) there is nothing to compare.
    conflict = (
        receipt is not None and row is not None and receipt.get("fingerprint") != row["fingerprint"]
    )
    asked = sink is not None
    seen = SinkSeen(asked, receipt, sink_where, sink_error, conflict, refused)
    stages = [
        _accepted_stage(order, row, source_shown),
        _outbox_stage(row, history, source_shown),
        _sink_stage(seen, broker=broker),
        _ack_stage(row, seen, via),
        _sent_stage(row, source_shown, held),
    ]
    verdict = _verdict(order, row, receipt, sink_error, conflict)
    if broker:
        verdict = _broker_verdict(row, receipt, sink_error, conflict, asked) or verdict
    elif not asked and row is not None and not row["quarantined"]:
        verdict = _unasked_verdict(row)
    if refused is not None:
        verdict = _refused_verdict(refused)
    return {
        "id": event_id,
        "stages": [asdict(stage) for stage in stages],
        "via": via,
        "verdict": verdict,
        "known": not (order is None and row is None and receipt is None and refused is None),
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


def _accepted_stage(order: dict[str, Any] | None, row: dict[str, Any] | None, source: str) -> Stage:
    where = f"table orders in {source}"
    if order is None and row is not None and row["type"] != LAB_TYPE:
        # An order row means something only for the lab's events: for any other type the
        # outbox row is the first evidence there is.
        return Stage(
            "accepted", YES, "published", f"table ackledger_outbox in {source}",
            f"a {row['type']} event of source {row['source']}, published at "
            f"{utc_timestamp(row['created_at'])} (seq={row['seq']})",
        )  # fmt: skip
    if order is None:
        return Stage(
            "accepted", NO, "no order row", where,
            "not a lab order: published with publish() or Outbox.transaction() (which write "
            "your own business rows, not orders), or never accepted here",
        )  # fmt: skip
    detail = f"sku={order['sku']} qty={order['qty']} at {utc_timestamp(order['created_at'])}"
    return Stage("accepted", YES, "order row", where, detail)


def _outbox_stage(row: dict[str, Any] | None, history: list[dict[str, Any]], source: str) -> Stage:
    where = f"table ackledger_outbox in {source}"
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


def _sink_stage(seen: SinkSeen, *, broker: bool) -> Stage:
    receipt, where, error, conflict = seen.receipt, seen.where, seen.error, seen.conflict
    asked = seen.asked
    if not asked:
        return Stage(
            "sink", UNKNOWN, "not asked", where,
            "give --sink: the sink service's URL, or the inbox database (SQLite file or "
            "postgresql:// URL) its sink or broker consumer writes",
        )  # fmt: skip
    if error is not None:
        return Stage("sink", UNKNOWN, "sink not readable", where, f"cannot tell: {error}")
    if receipt is None and seen.refused is not None:
        refused = seen.refused
        return Stage(
            "sink", YES, "refused at the sink", refused["where"],
            f"refused for good {refused['refusals']} time(s), first at "
            f"{utc_timestamp(refused['refused_at'])}: {refused['reason']}; kept as refused "
            f"message {refused['refused_no']} (not applied, rejected or terminated at the "
            "broker, dead-lettered where the queue has a dead-letter exchange)",
        )  # fmt: skip
    if receipt is None and broker:
        return Stage(
            "sink", NO, "no inbox receipt", where,
            "the consumer has not applied this id: still in the queue or stream, the consumer "
            "behind or stopped, or rejected as poison (dead-lettered or terminated: see the "
            "consumer's log and its ackledger_consumer_* metrics)",
        )  # fmt: skip
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


def _ack_stage(row: dict[str, Any] | None, seen: SinkSeen, via: dict[str, Any] | None) -> Stage:
    receipt, error, conflict, asked = seen.receipt, seen.error, seen.conflict, seen.asked
    where = "not stored anywhere (an ACK lives only in the relay's memory)"
    if row is not None and row["sent"]:
        return Stage(
            "ack", INFERRED, "an exact ACK arrived", where,
            "inferred from the sent mark, which is written only after an exact ACK"
            + _via_text(via),
        )  # fmt: skip
    if via is not None and via["kind"] in BROKERS and receipt is None and error is None:
        return Stage(
            "ack", UNKNOWN, "none marked", where,
            "not marked; a broker confirms when it stores the message, before any consumer "
            "sees it, so a confirm lost on the way back leaves a copy in the queue that the "
            f"outbox cannot see (target {via['target']}); the next send is absorbed by the "
            "consumer's inbox as a duplicate",
        )  # fmt: skip
    if not asked:
        return Stage(
            "ack", UNKNOWN, "cannot be known", where,
            "not marked, and the sink was not asked (--sink) whether it applied the event",
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


def _via_text(via: dict[str, Any] | None) -> str:
    if via is None:
        return (
            "; which target's ACK is not recorded (marked by dispatch() in your own code, or "
            "before this version recorded relay targets)"
        )
    text = (
        f"; the relay's target then: {via['target']} (started {utc_timestamp(via['started_at'])}), "
        f"so the ACK was {via['ack']}"
    )
    if via["others"]:
        text += (
            f" ({via['others']} other target(s) on record: with relays to several targets at "
            "once, this is the one started last before the mark)"
        )
    return text


def _broker_verdict(
    row: dict[str, Any] | None,
    receipt: dict[str, Any] | None,
    sink_error: str | None,
    conflict: bool,
    asked: bool,
) -> str | None:
    """The verdict where a broker stands between the outbox and the inbox; None where the
    sink's verdict says it as well."""
    if row is None or conflict or row["quarantined"]:
        return None
    if row["sent"]:
        if not asked:
            return "confirmed by the broker and marked sent; the consumer's inbox was not asked"
        if sink_error is not None:
            return "confirmed by the broker and marked sent; the consumer's inbox could not be read"
        if receipt is None:
            return "confirmed by the broker and marked sent; not yet applied by the consumer"
        return "confirmed by the broker, marked sent, and applied by the consumer"
    if receipt is not None:
        return (
            "applied by the consumer but not marked: the confirm was lost or the relay stopped "
            "between the confirm and the mark; it will be re-sent and absorbed as a duplicate"
        )
    return "pending: not yet confirmed by the broker"


def _refused_verdict(refused: dict[str, Any]) -> str:
    replay = f"ackledger refused replay {refused['refused_no']} --db {refused['db']}"
    return (
        f"refused at the sink: {refused['reason']}; NOT applied: fix the cause, then "
        f"`{replay}` applies it again"
    )


def _unasked_verdict(row: dict[str, Any]) -> str:
    if row["sent"]:
        return "delivered and marked sent (the sink was not asked)"
    return "pending (the sink was not asked whether it has it)"


def _sent_stage(
    row: dict[str, Any] | None, source: str, held: dict[str, Any] | None = None
) -> Stage:
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
    if held is not None:
        # Not "sendable now" for any relay but the holder; a killed holder's lease must end.
        return Stage(
            "sent", NO, "not marked", where,
            f"sent = 0: {lease_words(held)} (partition {held['partition']!r}); only that "
            "relay sends it before then, another relay takes the partition over after",
        )  # fmt: skip
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
