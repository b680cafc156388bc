"""ackledger: retry freely, apply once.

At-least-once delivery with effects applied once, inside a storage boundary you can name:
a transactional outbox at the source, an idempotent inbox at the sink, and an idempotency
ledger for jobs that are re-run in new processes.
"""

from .dispatch import dispatch, dispatch_batch
from .errors import (
    AckledgerError,
    Conflict,
    InvalidEvent,
    LeaseLost,
    NotAcknowledged,
    UnsafeTarget,
)
from .event import validate_event
from .inbox import Inbox
from .ledger import Ledger
from .outbox import Outbox
from .transport import send_http, send_http_batch

__all__ = [
    "AckledgerError",
    "Conflict",
    "Inbox",
    "InvalidEvent",
    "LeaseLost",
    "Ledger",
    "NotAcknowledged",
    "Outbox",
    "UnsafeTarget",
    "dispatch",
    "dispatch_batch",
    "send_http",
    "send_http_batch",
    "validate_event",
]
