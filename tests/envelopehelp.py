"""Helpers for the envelope tests: a minimal valid event and the refusal it turns into."""

from __future__ import annotations

from typing import Any

import pytest

from ackledger import EventTypes, InvalidEvent
from ackledger.envelope import validate_cloudevent

#: The smallest valid event: the four required attributes.
BASE: dict[str, Any] = {
    "specversion": "1.0",
    "id": "order-1",
    "source": "/orders-service",
    "type": "com.example.order.placed",
}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def refused(event: object, types: EventTypes | None = None) -> InvalidEvent:
    """The InvalidEvent that validating ``event`` raises."""
    with pytest.raises(InvalidEvent) as info:
        validate_cloudevent(event, types=types)
    return info.value
