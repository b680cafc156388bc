"""Building a new event."""

from __future__ import annotations

import uuid
from typing import Any

from .validate import validate_cloudevent


def new_event(
    type: str,
    data: Any = None,
    *,
    source: str,
    id: str | None = None,
    subject: str | None = None,
    partitionkey: str | None = None,
    **extensions: Any,
) -> dict[str, Any]:
    """A validated CloudEvents 1.0 event. Without ``id`` a fresh random one is made (32 hex
    digits); an id derived from the business step is better, as a re-run then makes the same
    event. ``data=None`` means no data. ``extensions`` may also give ``time``,
    ``datacontenttype``, ``traceparent`` and ``tracestate``; each is checked by its rule."""
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": uuid.uuid4().hex if id is None else id,
        "source": source,
        "type": type,
    }
    optional = {"data": data, "subject": subject, "partitionkey": partitionkey}
    event.update((name, value) for name, value in optional.items() if value is not None)
    event.update(extensions)
    return validate_cloudevent(event)
