"""The CloudEvents 1.0 envelope of CONTRACT v2 section 1: rules, canonical JSON, identity.

The outbox, the inbox and every sender speak it; ``ackledger.event`` keeps only v1's rules
of the lab's flat form and the small checks they share.
"""

from .._core.canonical import canonical_json
from .build import new_event
from .content import MAX_EVENT_BYTES, content_fingerprint, fingerprint_of, identity
from .validate import check_event_id, check_source, validate_cloudevent, validate_encoded

__all__ = [
    "MAX_EVENT_BYTES",
    "canonical_json",
    "check_event_id",
    "check_source",
    "content_fingerprint",
    "fingerprint_of",
    "identity",
    "new_event",
    "validate_cloudevent",
    "validate_encoded",
]
