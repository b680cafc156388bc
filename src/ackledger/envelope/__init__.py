"""The CloudEvents 1.0 envelope of CONTRACT v2 section 1: rules, canonical JSON, identity.

Not wired into the outbox, inbox or senders yet: they still speak v1 (``ackledger.event``).
"""

from .build import new_event
from .content import MAX_EVENT_BYTES, canonical_json, content_fingerprint, identity
from .validate import validate_cloudevent

__all__ = [
    "MAX_EVENT_BYTES",
    "canonical_json",
    "content_fingerprint",
    "identity",
    "new_event",
    "validate_cloudevent",
]
