"""The relay's failure policy: which failures are retried, and what a poison event does.

A failed send is *transient* (no connection, a time-out, a 5xx, an answer that is not an ACK,
a "not now" 4xx: wait and try the same event again) or *permanent* (the sink answered 4xx:
this event will never be accepted as it is). A broker's sender speaks in the same codes
(``wire.nats``: no stream for the subject is 404, an error PubAck keeps its own 400 or 503,
a time-out raises). A permanent failure is a poison event: by policy the relay holds it (the
default: stays up, alerts and tries it again every ``--max-backoff`` seconds, so a fix or an
operator's quarantine lets it go on, and a restart is no crash loop), stops (exit 3), or
quarantines it and goes on with the events behind it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .._core.failures import PERMANENT, TRANSIENT, kind_of_status
from ..errors import InvalidEvent, NotAcknowledged
from ..source.outbox import reason_from
from ..wire.sender import Refusal

# The failure classes are the one classifier's (``_core.failures``), named here for the relay.
__all__ = [
    "EXIT_POISON", "EXIT_STOPPED", "FAILURE_CLASSES", "PERMANENT", "POISON_POLICIES",
    "TRANSIENT", "Failure", "check_on_poison", "describe", "failure_class", "failure_of",
    "quarantine_reason", "stopping_on_poison",
]  # fmt: skip

FAILURE_CLASSES = (TRANSIENT, PERMANENT)
POISON_POLICIES = ("hold", "stop", "quarantine")
DEFAULT_ON_POISON = "hold"

EXIT_STOPPED = 0
#: The relay stopped on a poison event under ``--on-poison stop``.
EXIT_POISON = 3


def check_on_poison(value: object) -> str:
    if not isinstance(value, str) or value not in POISON_POLICIES:
        raise ValueError(f"on_poison: must be hold, stop or quarantine, got {value!r}")
    return value


#: A sink's 4xx is permanent (except "not now" answers); everything else is transient.
failure_class = kind_of_status


@dataclass(frozen=True)
class Failure:
    """One failed round: which event, which class, and what was said."""

    event_id: str | None
    kind: str
    message: str
    status: int | None = None
    #: Seconds the receiver asked to wait (a 429's or 503's ``Retry-After``), or None.
    retry_after: float | None = None


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure_of(exc: Exception, refusal: Refusal | None, event_id: str | None = None) -> Failure:
    """Judge a failed send. ``refusal`` is the sender's record of the batch item its answer
    refused: dispatch_batch then raises NotAcknowledged, which only the refusal can explain."""
    if refusal is not None and isinstance(exc, NotAcknowledged):
        status, detail = refusal.status, refusal.detail
        text = f"{refusal.protocol} {status} in batch: {detail}" if status else detail
        kind = PERMANENT if refusal.permanent else failure_class(status)
        return Failure(refusal.event_id, kind, text, status)
    status = exc.status if isinstance(exc, NotAcknowledged) else None
    wait = exc.retry_after if isinstance(exc, NotAcknowledged) else None
    # An event the outbox holds but the sender refuses to send can never go as it is; a
    # broker that returns it as unroutable says the same.
    never = isinstance(exc, InvalidEvent) or (isinstance(exc, NotAcknowledged) and exc.permanent)
    kind = PERMANENT if never else failure_class(status)
    return Failure(event_id, kind, describe(exc), status, wait)


def poison_hint(event_id: str, source: str) -> str:
    """What the operator does about a poison event, as commands that run as printed
    (``source``: the outbox as shown, never its password)."""
    where = f"{shlex.quote(event_id)} --source {shlex.quote(source)}"
    return (
        f"inspect with `ackledger trace {where}`, fix the cause, then "
        f"`ackledger quarantine {where} --reason 'refused by the sink'` or correct the sink"
    )


def stopping_on_poison(event_id: str, source: str) -> str:
    """The last line of a relay that stops on a poison event."""
    return "stopping: " + poison_hint(event_id, source)


def holding_poison(event_id: str, source: str, wait: float) -> str:
    """The line of a relay that holds a poison event, each time it tries it again."""
    return f"holding it, trying again in {wait:g}s: " + poison_hint(event_id, source)


def quarantine_reason(failure: Failure) -> str:
    return reason_from(f"sink refused it permanently: {failure.message}")
