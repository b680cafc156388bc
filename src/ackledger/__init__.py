"""ackledger: retry freely, apply once.

At-least-once delivery with effects applied once, inside a storage boundary you can name:
a transactional outbox at the source, an idempotent inbox at the sink, and an idempotency
ledger for jobs that are re-run in new processes.
"""

from . import warehouse
from ._version import __version__
from .envelope import MAX_EVENT_BYTES, new_event
from .envelope import validate_cloudevent as validate_event
from .errors import (
    AckledgerError,
    Conflict,
    InFlight,
    InvalidEvent,
    LeaseLost,
    NoHandler,
    NotAcknowledged,
    Rejected,
    UnsafeTarget,
)
from .event_types import EventTypes
from .ledger.client import LedgerClient
from .ledger.idempotency_middleware import IdempotencyMiddleware
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
    "IdempotencyMiddleware",
    "InFlight",
    "Inbox",
    "InvalidEvent",
    "LeaseLost",
    "Ledger",
    "LedgerClient",
    "NoHandler",
    "NotAcknowledged",
    "Outbox",
    "Rejected",
    "UnsafeTarget",
    "__version__",
    "dispatch",
    "dispatch_batch",
    "new_event",
    "send_http",
    "send_http_batch",
    "sender",
    "validate_event",
    "warehouse",
]
