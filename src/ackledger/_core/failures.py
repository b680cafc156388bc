"""The one classifier of failures: permanent, transient or conflict.

The relay judges a receiver's answer by its status, the consumers and the sink judge what the
inbox raised; all three ask here, so "never as it is" means the same everywhere. A conflict is
permanent too (the identity is taken by other content); it has its own class because the sink
and the operators' tools name it apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import Conflict, InvalidEvent, NoHandler, Rejected

TRANSIENT = "transient"
PERMANENT = "permanent"
CONFLICT = "conflict"
KINDS = (TRANSIENT, PERMANENT, CONFLICT)

#: 4xx answers that say "not now" rather than "never".
RETRYABLE_4XX = frozenset({408, 425, 429})


@dataclass(frozen=True)
class Refusal:
    """How an error the inbox raised is answered: its class and, for HTTP, its problem."""

    kind: str
    status: int
    slug: str
    title: str

    @property
    def permanent(self) -> bool:
        return self.kind != TRANSIENT


#: The errors that refuse an event for good, most specific first.
_REFUSALS: tuple[tuple[type[Exception], Refusal], ...] = (
    (InvalidEvent, Refusal(PERMANENT, 400, "invalid", "Invalid event")),
    (Conflict, Refusal(CONFLICT, 422, "conflict", "Conflicting content for this identity")),
    (NoHandler, Refusal(PERMANENT, 422, "no-handler", "No handler for this event type")),
    (Rejected, Refusal(PERMANENT, 422, "rejected", "The handler rejected this event")),
)
#: Anything else a handler (or the database) raised: try again later.
_TRANSIENT = Refusal(TRANSIENT, 503, "handler-failed", "The handler failed")


def refusal_of(error: BaseException) -> Refusal:
    """The class of an error raised while applying an event (and its HTTP answer)."""
    for kind, refusal in _REFUSALS:
        if isinstance(error, kind):
            return refusal
    return _TRANSIENT


def kind_of_error(error: BaseException) -> str:
    return refusal_of(error).kind


def kind_of_status(status: int | None) -> str:
    """A receiver's 4xx is permanent (except "not now" answers); everything else is transient.
    (A sink's 422 for a conflict is permanent here: the relay quarantines or stops alike.)"""
    if status is None or not 400 <= status < 500 or status in RETRYABLE_4XX:
        return TRANSIENT
    return PERMANENT
