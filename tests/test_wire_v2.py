"""The HTTP wire of CONTRACT v2 (section 5): CloudEvents in structured mode, and an ACK that
must name the event's whole identity, ``(source, id)``.

Raw scripted servers check the bytes sent and the answers refused; real sink processes check
that events of two sources with one id are two events, and that a generic event type with
nested ``data`` travels to a sink that has a handler for it and is acknowledged.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackledger
from ackledger import (
    NotAcknowledged,
    Outbox,
    dispatch,
    dispatch_batch,
    send_http,
    send_http_batch,
)
from ackledger.envelope import canonical_json
from ackledger.ops.processes import Service, start_listener
from ackledger.wire.http import close_connections
from tests.conftest import raw_rows
from tests.events import SOURCE, lab
from tests.orders_sink import ORDER_PLACED
from tests.rawserver import RawServer, header, http_answer

ROOT = Path(__file__).resolve().parents[1]

#: A generic event: not the warehouse type, with nested data and optional attributes.
ORDER = {
    "specversion": "1.0",
    "id": "order-1001",
    "source": "/orders-service",
    "type": ORDER_PLACED,
    "subject": "customer/42",
    "time": "2026-12-01T12:00:00.5+09:00",
    "datacontenttype": "application/json",
    "partitionkey": "customer-42",
    "region": "kansai",
    "data": {
        "order": {
            "lines": [{"sku": "pen", "qty": 2}, {"sku": "ink", "qty": 1}],
            "gift": {"wrap": True, "note": "für dich \u2603", "ribbon": None},
        },
        "tags": ["a", 1, 2.5, [], {}],
    },
}


@pytest.fixture(autouse=True)
def fresh_connections() -> Iterator[None]:
    close_connections()
    yield
    close_connections()


def echo_ack(body: bytes) -> bytes:
    """The exact ACK of the event (or each event of the batch) in ``body``."""
    sent = json.loads(body)
    if isinstance(sent, list):
        acks = [{"id": e["id"], "source": e["source"], "ack": True} for e in sent]
        return http_answer(200, json.dumps({"acks": acks}).encode())
    ack = {"ack": True, "id": sent["id"], "source": sent["source"], "status": "applied"}
    return http_answer(200, json.dumps(ack).encode())


def answer(payload: object) -> bytes:
    return http_answer(200, json.dumps(payload).encode())


# --- what is sent --------------------------------------------------------------------------------


@pytest.mark.parametrize("event", [lab("snack-7", "snack", 7), ORDER], ids=["lab", "generic"])
def test_one_event_is_posted_as_structured_cloudevents_json(event: dict[str, Any]) -> None:
    with RawServer(echo_ack) as server:
        assert send_http(event, server.url) is True
    head = server.heads[0]
    assert head.split(b"\r\n")[0] == b"POST /events HTTP/1.1"
    assert header(head, "Content-Type") == b"application/cloudevents+json"
    assert server.requests[0] == canonical_json(event).encode()
    assert json.loads(server.requests[0]) == event  # every attribute, nested data included


def test_the_trace_context_travels_as_http_headers_too() -> None:
    parent = "00-" + "4b" * 16 + "-" + "00f0" * 4 + "-01"
    traced = {**ORDER, "traceparent": parent, "tracestate": "shop=1"}
    with RawServer(echo_ack) as server:
        assert send_http(traced, server.url) is True
        assert send_http(ORDER, server.url) is True
    first, second = server.heads
    assert header(first, "traceparent") == parent.encode()
    assert header(first, "tracestate") == b"shop=1"
    assert header(first, "Content-Length") == str(len(server.requests[0])).encode()
    assert json.loads(server.requests[0])["traceparent"] == parent  # and in the event
    assert header(second, "traceparent") is None  # none invented for an event without one


def test_a_batch_is_posted_as_a_cloudevents_batch() -> None:
    events = [lab("b-0", "s", 1), ORDER, lab("b-2", "t", 3, source="/other")]
    with RawServer(echo_ack) as server:
        assert send_http_batch(events, server.url + "/batch") == 3
    head = server.heads[0]
    assert head.split(b"\r\n")[0] == b"POST /events/batch HTTP/1.1"
    assert header(head, "Content-Type") == b"application/cloudevents-batch+json"
    expected = "[" + ",".join(canonical_json(e) for e in events) + "]"
    assert server.requests[0] == expected.encode()


# --- what counts as an ACK -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [None, "urn:ackledger:other", "urn:ackledger:TEST", SOURCE + "/", "", 1],
    ids=["missing", "other", "other-case", "trailing-slash", "empty", "not-a-string"],
)
def test_an_ack_of_the_right_id_from_another_source_is_refused(source: object) -> None:
    ack: dict[str, object] = {"ack": True, "id": "snack-7", "status": "applied"}
    if source is not None:
        ack["source"] = source
    with (
        RawServer(lambda body: answer(ack)) as server,
        pytest.raises(NotAcknowledged, match="source") as caught,
    ):
        send_http(lab("snack-7", "snack", 7), server.url)
    assert caught.value.status == 200


def _batch_with_foreign_source(at: int) -> dict[str, object]:
    acks: list[dict[str, object]] = [
        {"id": f"b-{i}", "source": SOURCE, "ack": True, "status": "applied"} for i in range(3)
    ]
    acks[at]["source"] = "urn:ackledger:other"
    return {"acks": acks}


@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_batch_item_naming_another_source_ends_the_acknowledged_prefix(at: int) -> None:
    """Item by item, in order: the items before the foreign one stay acknowledged."""
    batch = [lab(f"b-{i}", "s", 1) for i in range(3)]
    with RawServer(lambda body: answer(_batch_with_foreign_source(at))) as server:
        assert send_http_batch(batch, server.url + "/batch") == at
        sender = ackledger.sender(server.url)
        try:
            assert sender.send_batch(batch) == at
            assert sender.refusal is not None
            assert sender.refusal.event_id == f"b-{at}"
            assert f"item {at} names source" in sender.refusal.detail
        finally:
            sender.close()


def test_an_outbox_marks_nothing_on_an_ack_from_another_source(tmp_path: Path) -> None:
    """Through the real relay steps: a foreign-source ACK is not evidence, so the event (or
    the whole batch) stays pending."""
    with Outbox(tmp_path / "o.db", source=SOURCE) as outbox:
        for i in range(3):
            outbox.accept({"id": f"b-{i}", "sku": "s", "qty": 1})
        foreign = {"ack": True, "id": "b-0", "source": "urn:ackledger:other"}
        with (
            RawServer(lambda body: answer(foreign)) as server,
            pytest.raises(NotAcknowledged, match="source"),
        ):
            dispatch(outbox, lambda event: send_http(event, server.url))
        assert [item["id"] for item in outbox.pending()] == ["b-0", "b-1", "b-2"]
        # A batch whose second ACK names another source: only the first is evidence.
        with RawServer(lambda body: answer(_batch_with_foreign_source(1))) as server:
            url = server.url + "/batch"
            with pytest.raises(NotAcknowledged):
                dispatch_batch(outbox, lambda events: send_http_batch(events, url))
        assert [item["id"] for item in outbox.pending()] == ["b-1", "b-2"]
        # The same outbox, answered with its own source, marks the rest.
        with RawServer(echo_ack) as server:
            url = server.url + "/batch"
            marked = dispatch_batch(outbox, lambda events: send_http_batch(events, url))
        assert marked == ["b-1", "b-2"]
        assert outbox.pending() == []


# --- real sinks ----------------------------------------------------------------------------------


def test_one_id_from_two_sources_is_two_events_at_a_real_sink(
    sink_service: Service, sink_db: Path
) -> None:
    url = sink_service.base_url + "/events"
    assert send_http(lab("x-1", "cup", 2, source="/shop-a"), url) is True
    assert send_http(lab("x-1", "cup", 5, source="/shop-b"), url) is True
    assert send_http(lab("x-1", "cup", 2, source="/shop-a"), url) is True  # a duplicate
    assert raw_rows(sink_db, "SELECT qty FROM inventory WHERE sku = 'cup'") == [(7,)]
    rows = raw_rows(sink_db, "SELECT source, id FROM ackledger_inbox ORDER BY source")
    assert rows == [("/shop-a", "x-1"), ("/shop-b", "x-1")]


@pytest.fixture
def orders_sink(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    """A real sink process whose inbox has a handler for ``com.example.order.placed``."""
    db = tmp_path / "orders.db"
    service = start_listener(
        [sys.executable, "-m", "tests.orders_sink", str(db)],
        env={"PYTHONPATH": str(ROOT)},
        stderr_path=tmp_path / "orders-sink.log",
    )
    try:
        yield service, db
    finally:
        service.stop()


def test_a_generic_event_with_nested_data_is_sent_and_acknowledged(
    orders_sink: tuple[Service, Path], tmp_path: Path
) -> None:
    service, db = orders_sink
    url = service.base_url + "/events"
    with Outbox(tmp_path / "source.db") as outbox:
        seq = outbox.publish(ORDER)
        assert [item["seq"] for item in outbox.pending()] == [seq]
        assert dispatch(outbox, lambda event: send_http(event, url)) == ["order-1001"]
        assert outbox.pending() == []
    lines = raw_rows(db, "SELECT order_id, sku, qty FROM order_lines ORDER BY sku")
    assert lines == [("order-1001", "ink", 1), ("order-1001", "pen", 2)]
    # Sent again (a lost ACK): acknowledged, not applied a second time.
    assert send_http(ORDER, url) is True
    assert raw_rows(db, "SELECT COUNT(*) FROM order_lines") == [(2,)]
    # The same identity with other nested data is a conflict, not an ACK.
    changed = json.loads(json.dumps(ORDER))
    changed["data"]["order"]["lines"][0]["qty"] = 3
    with pytest.raises(NotAcknowledged) as caught:
        send_http(changed, url)
    assert caught.value.status == 422
    assert raw_rows(db, "SELECT COUNT(*) FROM order_lines") == [(2,)]


def test_a_generic_event_is_refused_by_a_sink_without_its_handler(
    sink_service: Service, sink_db: Path
) -> None:
    with pytest.raises(NotAcknowledged, match="handler") as caught:
        send_http(ORDER, sink_service.base_url + "/events")
    assert caught.value.status == 422
    assert raw_rows(sink_db, "SELECT COUNT(*) FROM ackledger_inbox") == [(0,)]
