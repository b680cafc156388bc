"""The envelope against the CNCF CloudEvents SDK (``cloudevents`` 2.x, a test-only
dependency, both its v1 and its core API): what we emit, the SDK parses; what the SDK emits, we
accept; over HTTP, a real sink applies the SDK's requests in both modes, and the SDK reads what
the relay sends."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cloudevents.core.bindings.http import (
    HTTPMessage,
    from_http_event,
    to_binary_event,
    to_structured_event,
)
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent as CoreEvent
from cloudevents.v1.conversion import to_binary, to_dict, to_json, to_structured
from cloudevents.v1.http import CloudEvent as LegacyEvent
from cloudevents.v1.http import from_http, from_json
from hypothesis import given
from hypothesis import strategies as st

from ackledger import Outbox, new_event, warehouse
from ackledger.envelope import canonical_json, content_fingerprint, validate_cloudevent
from ackledger.ops.processes import Service, run_cli
from tests.conftest import raw_rows
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


# --- over HTTP: the SDKs as a sink's clients, and as the reader of what we send ---------------


def _sdk_lab(event_id: str) -> dict[str, Any]:
    return {"type": warehouse.TYPE, "source": "/sdk-shop", "id": event_id}


def _post(service: Service, headers: Mapping[str, str], body: bytes | str) -> tuple[int, Any]:
    # http.client sends the headers given and no others (urllib would add a Content-Type).
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    try:
        conn.request("POST", "/events", body.encode() if isinstance(body, str) else body, headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def test_the_sdks_requests_in_both_modes_are_applied_once_by_a_real_sink(
    sink_service: Service, sink_db: Path
) -> None:
    data = {"sku": "tea", "qty": 2}
    requests: list[tuple[Mapping[str, str], bytes | str]] = []
    # The v1 API: its HTTP event and its conversion functions (a body without Content-Type
    # in binary mode, read as JSON; header values as they are, so ASCII only).
    for number, convert in enumerate((to_binary, to_structured)):
        requests.append(convert(LegacyEvent(_sdk_lab(f"v1-{number} a/x"), data)))
    # The core API: the HTTP binding's messages (percent-encoded ce- values).
    for number, bind in enumerate((to_binary_event, to_structured_event)):
        message = bind(CoreEvent(_sdk_lab(f"core-{number} ü/x"), data))
        requests.append((message.headers, message.body))
    for headers, body in requests:
        status, answer = _post(sink_service, headers, body)
        assert (status, answer["status"]) == (200, "applied"), answer
        # The same request again: a duplicate, answered as such.
        status, answer = _post(sink_service, headers, body)
        assert (status, answer["status"]) == (200, "duplicate"), answer
    assert raw_rows(sink_db, "SELECT qty FROM inventory WHERE sku = 'tea'") == [(8,)]
    ids = raw_rows(sink_db, "SELECT id FROM ackledger_inbox ORDER BY id")
    assert ids == [("core-0 ü/x",), ("core-1 ü/x",), ("v1-0 a/x",), ("v1-1 a/x",)]


class _SdkReader(ThreadingHTTPServer):
    """A receiver that reads each request with the SDK (both APIs) and echoes its identity."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SdkHandler)
        self.read: list[tuple[Any, Any]] = []


class _SdkHandler(BaseHTTPRequestHandler):
    server: _SdkReader

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {name.lower(): value for name, value in self.headers.items()}
        legacy = from_http(headers, body)
        core = from_http_event(HTTPMessage(headers, body))
        self.server.read.append((legacy, core))
        answer = json.dumps(
            {"ack": True, "id": core.get_id(), "source": core.get_source(), "status": "applied"}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_sdks_read_what_the_relay_sends(tmp_path: Path) -> None:
    reader = _SdkReader()
    thread = threading.Thread(target=reader.serve_forever, daemon=True)
    thread.start()
    sent = [
        warehouse.event("order-1", "snack-7", 7, source="/warehouse"),
        full_event(),
        new_event("com.example.text", "Hello, 🌎!", source="/t", id="t 1/ü",
                  datacontenttype="text/plain; charset=utf-8"),
    ]  # fmt: skip
    try:
        with Outbox(tmp_path / "source.db") as outbox:
            for event in sent:
                outbox.publish(event)
            url = f"http://127.0.0.1:{reader.server_address[1]}/events"
        shown = run_cli("dispatch", "--source", str(tmp_path / "source.db"), "--to", url)
        assert shown.returncode == 0, shown.stderr
        with Outbox(tmp_path / "source.db") as outbox:
            assert outbox.pending() == []
    finally:
        reader.shutdown()
        reader.server_close()
    assert len(reader.read) == len(sent)
    for event, (legacy, core) in zip(sent, reader.read, strict=True):
        assert (core.get_id(), core.get_source(), core.get_type()) == (
            event["id"], event["source"], event["type"],
        )  # fmt: skip
        assert core.get_data() == event.get("data") == legacy.get_data()
        assert core.get_datacontenttype() == event.get("datacontenttype")
        assert legacy["id"] == event["id"]
