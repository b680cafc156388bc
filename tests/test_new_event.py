"""CONTRACT v2 section 1: ``new_event`` builds a valid event."""

from __future__ import annotations

import pytest

import ackledger
from ackledger import InvalidEvent, new_event
from ackledger.envelope import validate_cloudevent
from tests.envelopehelp import TRACEPARENT, full_event


def test_exported_from_the_package() -> None:
    from ackledger.envelope import new_event as inner

    assert ackledger.new_event is inner


def test_the_smallest_event() -> None:
    event = new_event("com.example.ping", source="/pinger", id="ping-1")
    assert event == {
        "specversion": "1.0",
        "id": "ping-1",
        "source": "/pinger",
        "type": "com.example.ping",
    }
    assert validate_cloudevent(event) == event


def test_every_attribute() -> None:
    assert full_event() == {
        "specversion": "1.0",
        "id": "order-2",
        "source": "urn:shop:orders",
        "type": "com.example.order.placed",
        "data": {
            "total": 5,
            "lines": [{"sku": "a", "price": 1.25}],
            "note": "在庫 ✓",
            "gift": False,
        },
        "subject": "customer-9",
        "partitionkey": "customer-9",
        "time": "2024-01-01T12:30:00.5+09:00",
        "datacontenttype": "application/json",
        "traceparent": TRACEPARENT,
        "tracestate": "rojo=00f067aa0ba902b7",
        "region": "eu1",
        "retries": 2,
        "sampled": True,
    }


def test_without_an_id_each_event_gets_a_fresh_valid_one() -> None:
    ids = {new_event("com.example.ping", source="/p")["id"] for _ in range(100)}
    assert len(ids) == 100
    for event_id in ids:
        assert validate_cloudevent({**new_event("t", source="/p"), "id": event_id})


def test_data_none_means_no_data_but_other_falsy_data_is_kept() -> None:
    assert "data" not in new_event("t", None, source="/p")
    data: object
    for data in (0, "", [], {}, False):
        assert new_event("t", data, source="/p")["data"] == data


def test_the_data_is_copied() -> None:
    data = {"items": [1]}
    event = new_event("t", data, source="/p")
    data["items"].append(2)
    assert event["data"] == {"items": [1]}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"type": "line\nbreak", "source": "/p"}, "type"),
        ({"type": "t", "source": ""}, "source"),
        ({"type": "t", "source": "/p", "id": "nul\x00"}, "id"),
        ({"type": "t", "source": "/p", "subject": ""}, "subject"),
        ({"type": "t", "source": "/p", "partitionkey": "a\nb"}, "partitionkey"),
        ({"type": "t", "source": "/p", "time": "yesterday"}, "time"),
        ({"type": "t", "source": "/p", "Bad": 1}, "Bad"),
        ({"type": "t", "source": "/p", "ext": [1]}, "ext"),
        ({"type": "t", "source": "/p", "data": float("nan")}, "data"),
        ({"type": "warehouse.stock.added", "source": "/p", "data": {"sku": "a"}}, "data.qty"),
    ],
)
def test_what_it_builds_is_validated(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        new_event(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
