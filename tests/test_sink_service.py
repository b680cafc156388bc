from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ackledger._dev.procs import Service
from tests.conftest import raw_rows

pytestmark = pytest.mark.slow

SNACK = {"id": "snack-7", "sku": "snack", "qty": 7}


def request(
    service: Service,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    # A body is JSON unless a test says otherwise (the services refuse any other type).
    sent = {"Content-Type": "application/json"} if body is not None else {}
    sent.update(headers or {})
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def post(service: Service, payload: Any, path: str = "/events") -> tuple[int, dict[str, str], Any]:
    status, headers, body = request(service, "POST", path, json.dumps(payload).encode())
    return status, headers, json.loads(body)


def sink_state(path: Path) -> tuple[object, object]:
    return (
        raw_rows(path, "SELECT id, receipts FROM inbox ORDER BY id"),
        raw_rows(path, "SELECT sku, qty FROM inventory ORDER BY sku"),
    )


def test_applied_then_duplicate(sink_service: Service, sink_db: Path) -> None:
    status, headers, body = post(sink_service, SNACK)
    assert (status, body) == (200, {"ack": True, "id": "snack-7", "status": "applied"})
    assert "idempotent-replayed" not in headers
    status, headers, body = post(sink_service, SNACK)
    assert (status, body) == (200, {"ack": True, "id": "snack-7", "status": "duplicate"})
    assert headers["idempotent-replayed"] == "true"
    assert sink_state(sink_db) == ([("snack-7", 2)], [("snack", 7)])


def test_conflict_is_422_problem_json_and_changes_nothing(
    sink_service: Service, sink_db: Path
) -> None:
    post(sink_service, SNACK)
    before = sink_state(sink_db)
    status, headers, body = post(sink_service, {**SNACK, "qty": 8})
    assert status == 422
    assert headers["content-type"].startswith("application/problem+json")
    assert body["status"] == 422 and "snack-7" in body["detail"] and body["title"]
    assert sink_state(sink_db) == before


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{not json", "body"),
        (b"", "body"),
        (b"[1, 2]", "event"),
        (b'"snack"', "event"),
        (json.dumps({"id": "a", "sku": "s"}).encode(), "qty"),
        (json.dumps({"id": "a", "sku": "s", "qty": True}).encode(), "qty"),
        (json.dumps({"id": "a", "sku": "s", "qty": "3"}).encode(), "qty"),
        (json.dumps({"id": "a b", "sku": "s", "qty": 3}).encode(), "id"),
        (json.dumps({"id": "a", "sku": "s", "qty": 3, "note": 1}).encode(), "note"),
        (b"\xff\xfe", "body"),
    ],
)
def test_invalid_input_is_400_naming_the_field(
    sink_service: Service, sink_db: Path, raw: bytes, field: str
) -> None:
    status, headers, body = request(sink_service, "POST", "/events", raw)
    problem = json.loads(body)
    assert status == 400
    assert headers["content-type"].startswith("application/problem+json")
    assert problem["field"] == field
    assert field in problem["detail"]
    assert sink_state(sink_db) == ([], [])


def test_bodies_over_64_kib_are_413(sink_service: Service, sink_db: Path) -> None:
    big = json.dumps({**SNACK, "sku": "x" * 70_000}).encode()
    status, _, _ = request(sink_service, "POST", "/events", big)
    assert status == 413
    # Also without a Content-Length (chunked): the cap applies to what arrives.
    conn = http.client.HTTPConnection("127.0.0.1", sink_service.port, timeout=10)
    try:
        conn.putrequest("POST", "/events")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.putheader("Content-Type", "application/json")
        conn.endheaders()
        for _ in range(10):
            chunk = b"x" * 8192
            conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        conn.send(b"0\r\n\r\n")
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    assert sink_state(sink_db) == ([], [])


def test_batch_applies_the_prefix_and_reports_the_first_error(
    sink_service: Service, sink_db: Path
) -> None:
    post(sink_service, {"id": "x", "sku": "tea", "qty": 1})
    items = [
        {"id": "a", "sku": "tea", "qty": 2},
        {"id": "x", "sku": "tea", "qty": 1},
        {"id": "x", "sku": "tea", "qty": 5},
        {"id": "b", "sku": "tea", "qty": 4},
    ]
    status, _, body = post(sink_service, items, "/events/batch")
    assert status == 200
    assert body["acks"] == [
        {"id": "a", "ack": True, "status": "applied"},
        {"id": "x", "ack": True, "status": "duplicate"},
    ]
    assert body["error"]["status"] == 422 and body["error"]["index"] == 2
    assert sink_state(sink_db)[1] == [("tea", 3)]


@pytest.mark.parametrize("payload", [[], {"id": "a"}, [{"id": "a", "sku": "s", "qty": 1}] * 17])
def test_batch_body_must_be_a_list_of_1_to_16(sink_service: Service, payload: object) -> None:
    status, _, body = post(sink_service, payload, "/events/batch")
    assert status == 400 and body["field"] == "body"


def test_receipts_health_and_metrics(sink_service: Service) -> None:
    post(sink_service, SNACK)
    post(sink_service, SNACK)
    post(sink_service, {**SNACK, "qty": 1})
    status, _, body = request(sink_service, "GET", "/events/snack-7")
    assert status == 200 and json.loads(body)["receipts"] == 2
    assert request(sink_service, "GET", "/events/never-sent")[0] == 404
    assert request(sink_service, "GET", "/healthz")[0] == 200
    status, headers, text = request(sink_service, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if not sample.labels
    }
    assert samples["ackledger_sink_applied_total"] == 1
    assert samples["ackledger_sink_duplicate_total"] == 1
    assert samples["ackledger_sink_conflict_total"] == 1
    spec = json.loads(request(sink_service, "GET", "/openapi.json")[2])
    assert "/events" in spec["paths"]
