"""Helpers for the envelope tests: a minimal valid event and the refusal it turns into."""

from __future__ import annotations

from typing import Any

import pytest

from ackledger import EventTypes, InvalidEvent, new_event
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


def full_event() -> dict[str, Any]:
    """An event with every known attribute and a few extensions, built by ``new_event``."""
    return new_event(
        "com.example.order.placed",
        {"total": 5, "lines": [{"sku": "a", "price": 1.25}], "note": "在庫 ✓", "gift": False},
        source="urn:shop:orders",
        id="order-2",
        subject="customer-9",
        partitionkey="customer-9",
        time="2024-01-01T12:30:00.5+09:00",
        datacontenttype="application/json",
        traceparent=TRACEPARENT,
        tracestate="rojo=00f067aa0ba902b7",
        region="eu1",
        retries=2,
        sampled=True,
    )
