"""ackledger: retry freely, apply once.

At-least-once delivery with effects applied once, inside a storage boundary you can name:
a transactional outbox at the source, an idempotent inbox at the sink, and an idempotency
ledger for jobs that are re-run in new processes.
"""

from . import warehouse
from .envelope import MAX_EVENT_BYTES, new_event
from .errors import (
    AckledgerError,
    Conflict,
    InvalidEvent,
    LeaseLost,
    NoHandler,
    NotAcknowledged,
    Rejected,
    UnsafeTarget,
)
from .event import validate_event
from .event_types import EventTypes
from .ledger.ledger import Ledger
from .sink.inbox import Inbox
from .source.dispatch import dispatch, dispatch_batch
from .source.outbox import Outbox
from .wire.http import send_http, send_http_batch
from .wire.sender import sender

__all__ = [
    "MAX_EVENT_BYTES",
    "AckledgerError",
    "Conflict",
    "EventTypes",
    "Inbox",
    "InvalidEvent",
    "LeaseLost",
    "Ledger",
    "NoHandler",
    "NotAcknowledged",
    "Outbox",
    "Rejected",
    "UnsafeTarget",
    "dispatch",
    "dispatch_batch",
    "new_event",
    "send_http",
    "send_http_batch",
    "sender",
    "validate_event",
    "warehouse",
]
