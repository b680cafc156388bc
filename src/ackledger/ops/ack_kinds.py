"""What a sent mark stands for, by the kind of target that earned it.

An outbox marks an event only on an exact ACK, but the ACK itself is never stored; what the
outbox does keep is which targets its relays were started against (``Outbox.targets``). From
the target in use when the mark was written, ``trace`` can say what kind of evidence the mark
rests on: the sink's own commit (HTTP), or a broker's receipt that comes before any consumer.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

#: What each kind of ACK proves, in the words ``trace`` prints.
ACK_MEANS = {
    "http": "the sink's answer naming this event's id and source, which it sends only after "
    "its inbox committed the event",
    "amqp": "RabbitMQ's publisher confirm (basic.ack) for its delivery tag with no basic.return "
    "before it: the broker routed the persistent message to at least one queue and stored it",
    "nats": "a JetStream PubAck from the expected stream (a duplicate PubAck too: the stream "
    "already held this Nats-Msg-Id): the stream stored it",
}

BROKERS = frozenset({"amqp", "nats"})
#: How ``trace``, ``status`` and the metrics name a mark earned under ``ack="status"``.
STATUS_ACK = "2xx without identity"
_STATUS_MEANS = (
    f"a {STATUS_ACK} (--ack status): the receiver answered 2xx, naming no event, so the mark "
    "rests on its status alone"
)


def kind_of(target: str) -> str:
    """``http``, ``amqp``, ``nats`` or ``unknown`` for a recorded target URL."""
    scheme = urlsplit(target).scheme.lower()
    if scheme in ("http", "https"):
        return "http"
    return scheme if scheme in BROKERS else "unknown"


def target_for(targets: list[dict[str, Any]], row: dict[str, Any] | None) -> dict[str, Any] | None:
    """The recorded target that stands behind ``row``'s state: for a sent row, the one
    started last before its mark; for any other row, the one started last (it sends next).
    ``None`` when no relay recorded one (marks made by ``dispatch()`` in the caller's code,
    or before targets were recorded). ``others`` counts the other targets on record, so the
    report can say when two relays could have marked it."""
    if not targets:
        return None
    if row is not None and row["sent"] and row["sent_at"] is not None:
        before = [target for target in targets if target["started_at"] <= row["sent_at"]]
        if not before:
            return None
        chosen = before[-1]
    else:
        chosen = targets[-1]
    kind = kind_of(chosen["target"])
    means = ACK_MEANS.get(kind, "an exact ACK of a sender this version does not know")
    return {
        "target": chosen["target"],
        "kind": kind,
        "started_at": chosen["started_at"],
        "ack": _STATUS_MEANS if chosen.get("ack") == "status" else means,
        "others": len(targets) - 1,
    }
