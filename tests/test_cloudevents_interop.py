"""The envelope against the CNCF CloudEvents SDK (``cloudevents`` 2.x, a test-only
dependency): what we emit, the SDK parses; what the SDK emits, we accept."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent as CoreEvent
from cloudevents.v1.conversion import to_dict, to_json
from cloudevents.v1.http import CloudEvent as LegacyEvent
from cloudevents.v1.http import from_json
from hypothesis import given
from hypothesis import strategies as st

from ackledger import new_event, warehouse
from ackledger.envelope import canonical_json, content_fingerprint, validate_cloudevent
from tests.envelopehelp import TRACEPARENT, full_event

OURS = [
    warehouse.event("order-1", "snack-7", 7, source="/warehouse"),
    new_event("com.example.ping", source="urn:shop:orders", id="ping-1"),
    full_event(),
    new_event("com.example.text", "plain text data", source="/t", id="t-1"),
    new_event("com.example.list", [1, None, "x"], source="/t", id="t-2"),
]


@pytest.mark.parametrize("event", OURS, ids=lambda e: str(e["id"]))
def test_the_core_sdk_reads_what_we_emit(event: dict[str, Any]) -> None:
    parsed = JSONFormat().read(None, canonical_json(event).encode("utf-8"))
    assert (parsed.get_specversion(), parsed.get_id()) == ("1.0", event["id"])
    assert (parsed.get_source(), parsed.get_type()) == (event["source"], event["type"])
    assert parsed.get_subject() == event.get("subject")
    assert parsed.get_datacontenttype() == event.get("datacontenttype")
    assert parsed.get_data() == event.get("data")
    for name in ("partitionkey", "traceparent", "tracestate", "region", "retries", "sampled"):
        assert parsed.get_extension(name) == event.get(name)
    if "time" in event:
        assert parsed.get_time() == datetime.fromisoformat(event["time"])


@pytest.mark.parametrize("event", OURS, ids=lambda e: str(e["id"]))
def test_the_legacy_sdk_reads_what_we_emit(event: dict[str, Any]) -> None:
    parsed = from_json(canonical_json(event))
    attributes = {name: parsed[name] for name in parsed}
    if "time" not in event:
        del attributes["time"]  # the legacy SDK stamps one of its own
    assert attributes == {k: v for k, v in event.items() if k != "data"}
    assert parsed.get_data() == event.get("data")


def test_we_accept_what_the_core_sdk_emits() -> None:
    theirs = CoreEvent(
        {
            "type": "com.example.order.placed",
            "source": "/orders",
            "subject": "customer-9",
            "partitionkey": "customer-9",
            "traceparent": TRACEPARENT,
            "region": "eu1",
        },
        {"total": 5, "note": "é"},
    )
    text = JSONFormat().write(theirs)
    event = validate_cloudevent(json.loads(text))
    assert event["id"] == theirs.get_id()  # the SDK's own id: a UUID with dashes
    assert event["time"].endswith("Z")
    assert event["data"] == {"total": 5, "note": "é"}
    assert {k: event[k] for k in ("subject", "partitionkey", "traceparent", "region")} == {
        "subject": "customer-9",
        "partitionkey": "customer-9",
        "traceparent": TRACEPARENT,
        "region": "eu1",
    }


def test_we_accept_what_the_legacy_sdk_emits() -> None:
    theirs = LegacyEvent(
        {"type": "warehouse.stock.added", "source": "/warehouse", "id": "order-1"},
        {"sku": "snack-7", "qty": 7},
    )
    event = validate_cloudevent(json.loads(to_json(theirs)))
    assert event["data"] == {"sku": "snack-7", "qty": 7}
    assert event["time"] == theirs["time"]  # isoformat with +00:00
    # to_dict writes "data": None for an event without data: null means absent
    dataless = LegacyEvent({"type": "com.example.ping", "source": "/p"})
    assert "data" not in validate_cloudevent(to_dict(dataless))


def test_the_sdk_refuses_what_it_should_and_so_do_we() -> None:
    # Both sides refuse an uppercase extension name.
    with pytest.raises(Exception, match="lowercase"):
        CoreEvent({"type": "t", "source": "/s", "Bad": "x"})
    bad = {"specversion": "1.0", "id": "1", "source": "/s", "type": "t", "Bad": "x"}
    with pytest.raises(ValueError, match="lowercase"):
        validate_cloudevent(bad)


json_data = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(
    json_data,
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True),
    st.sampled_from([None, "snack-7", "在庫"]),
)
def test_a_round_trip_through_the_sdk_keeps_the_content(
    data: object, event_id: str, subject: str | None
) -> None:
    ours = new_event("com.example.any", data, source="/any", id=event_id, subject=subject)
    through = JSONFormat().write(JSONFormat().read(None, canonical_json(ours)))
    back = validate_cloudevent(json.loads(through))
    # The SDK adds a time of its own; time is not content, so the fingerprint holds.
    assert datetime.fromisoformat(back["time"]) <= datetime.now(UTC)
    assert content_fingerprint(back) == content_fingerprint(ours)
