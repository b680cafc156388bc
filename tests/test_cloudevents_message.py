"""The one message reader (``envelope.message``) as the brokers use it: RabbitMQ's three header
prefixes and NATS's percent-encoded ``ce-`` headers, and what the senders' binary mode writes
(``binary_body`` and the headers) read back to the same event."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cloudevents.core.bindings import amqp as sdk_amqp
from cloudevents.core.bindings import rabbitmq as sdk_rabbitmq
from cloudevents.core.v1.event import CloudEvent as CoreEvent
from hypothesis import given
from hypothesis import strategies as st

from ackledger import InvalidEvent, new_event
from ackledger.envelope import canonical_json, content_fingerprint, validate_cloudevent
from ackledger.envelope.message import (
    AMQP_PREFIXES,
    CE_PREFIXES,
    NOT_BINARY_HEADERS,
    UnsupportedMedia,
    binary_body,
    decode_broker_message,
)
from ackledger.wire.nats_target import headers_of
from tests.envelopehelp import BASE

LAB = {
    **BASE,
    "id": "a b/1+=é",
    "type": "warehouse.stock.added",
    "subject": "snack 7",
    "data": {"sku": "snack-7", "qty": 7},
}


@pytest.mark.parametrize("prefix", ["ce-", "cloudEvents_", "cloudEvents:", "CE-"])
def test_rabbitmq_reads_each_prefix_in_binary_mode(prefix: str) -> None:
    headers = {f"{prefix}{k}": v for k, v in LAB.items() if k != "data"}
    if prefix.lower() == "ce-":
        headers[f"{prefix}id"] = "a%20b/1+=%C3%A9"
    event = decode_broker_message("application/json", headers, canonical_json(LAB["data"]).encode())
    assert event == {**LAB, "datacontenttype": "application/json"}
    assert content_fingerprint(validate_cloudevent(event)) == content_fingerprint(LAB)


def test_rabbitmq_header_values_keep_their_amqp_types() -> None:
    headers = {f"cloudEvents_{k}": v for k, v in LAB.items() if k != "data"}
    headers |= {
        "cloudEvents_count": 3,
        "cloudEvents_flag": True,
        "cloudEvents_note": b"caf\xc3\xa9",
    }
    event = decode_broker_message(None, headers, b"")
    assert (event["count"], event["flag"], event["note"]) == (3, True, "café")


def test_a_structured_message_is_its_body_whatever_its_headers() -> None:
    body = canonical_json(LAB).encode()
    for content_type in (None, "application/json", "application/cloudevents+json"):
        assert decode_broker_message(content_type, None, body) == LAB
    # Our senders' headers beside a structured body (and a broken one) are not read.
    headers = {"ce-id": "%zz", "content-type": "application/cloudevents+json"}
    assert decode_broker_message(None, headers, body) == LAB


@pytest.mark.parametrize(
    ("content_type", "headers", "body", "unsupported"),
    [
        ("text/plain", {}, b"hello", True),
        ("application/cloudevents+avro", {}, b"x", True),
        (None, {"ce-id": "%zz", "ce-specversion": "1.0"}, b"", False),
        ("application/json", {"ce-id": "a"}, b"{", False),
        (None, {"ce-data": "x"}, b"", False),
    ],
)
def test_what_cannot_be_read_is_refused_naming_it(
    content_type: str | None, headers: dict[str, Any], body: bytes, unsupported: bool
) -> None:
    with pytest.raises(InvalidEvent) as refused:
        decode_broker_message(content_type, headers, body)
    assert isinstance(refused.value, UnsupportedMedia) is unsupported


def test_the_sdks_rabbitmq_and_amqp_bindings_are_read() -> None:
    theirs = CoreEvent(
        {"type": "warehouse.stock.added", "source": "/wh", "id": "a b/1", "region": "eu"},
        {"sku": "s", "qty": 1},
    )
    rabbit = sdk_rabbitmq.to_binary_event(theirs)
    from_rabbit = decode_broker_message(rabbit.content_type, rabbit.headers, rabbit.body)
    amqp = sdk_amqp.to_binary_event(theirs)
    from_amqp = decode_broker_message(
        None, amqp.application_properties, amqp.application_data, AMQP_PREFIXES
    )
    for event in (from_rabbit, from_amqp):
        valid = validate_cloudevent(event)
        assert (valid["id"], valid["region"], valid["data"]) == ("a b/1", "eu", theirs.get_data())
        # The AMQP binding's timestamp (milliseconds) is read as RFC 3339, to the millisecond.
        sent = theirs.get_time()
        assert sent is not None and valid["time"][:23] == sent.isoformat()[:23]


EVENTS = [
    LAB,
    new_event("com.example.ping", source="/p", id="p 1"),
    new_event("com.example.t", "Hello, 🌎!", source="/t", id="t", datacontenttype="text/plain"),
    {**BASE, "datacontenttype": "application/xml; charset=utf-8", "data": "<a>é</a>"},
    {**BASE, "datacontenttype": "text/plain; charset=latin-1", "data": "café"},
    {**BASE, "datacontenttype": "image/png", "data_base64": base64.b64encode(b"\x89PNG").decode()},
    {**BASE, "datacontenttype": "application/json; charset=utf-8", "data": "Hello"},
    {**BASE, "data": [1, {"a": None}], "region": "eu 1", "n": -5, "ok": False},
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: str(e.get("datacontenttype")))
def test_what_binary_mode_sends_over_nats_reads_back_as_the_same_event(
    event: dict[str, Any],
) -> None:
    valid = validate_cloudevent(event)
    content_type, body = binary_body(valid)
    headers = headers_of(valid, None, frozenset(), content_type)
    assert not {f"ce-{name}" for name in NOT_BINARY_HEADERS} & set(headers)
    back = validate_cloudevent(decode_broker_message(None, headers, body, CE_PREFIXES))
    expected = dict(valid)
    if "data" in valid and "datacontenttype" not in valid:
        expected["datacontenttype"] = "application/json"  # not content: the same event
    for name in ("n", "ok"):
        if name in expected:
            expected[name] = str(expected[name]).lower()  # a header carries text
    assert back == expected


@given(st.text(min_size=1, max_size=40).filter(lambda t: t.isprintable()))
def test_nats_percent_encodes_every_header_value_the_binding_says(text: str) -> None:
    valid = validate_cloudevent({**BASE, "subject": text})
    headers = headers_of(valid)
    assert all(0x21 <= ord(ch) <= 0x7E and ch not in '"' for ch in headers["ce-subject"])
    decoded = decode_broker_message("application/json", headers, b"")
    assert decoded["subject"] == text
