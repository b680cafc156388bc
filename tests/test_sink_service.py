"""The sink's app, asked in-process on a real SQLite file (tests/inprocess.py): every kind of
answer. The hot routes' bytes on the wire are checked through a real process in
tests/test_sink_fastpath.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import raw_rows
from tests.inprocess import InProcess

SNACK = {"id": "snack-7", "sku": "snack", "qty": 7}


def post(app: InProcess, payload: Any, path: str = "/events") -> tuple[int, dict[str, str], Any]:
    status, headers, body = app.request("POST", path, json.dumps(payload).encode())
    return status, headers, json.loads(body)


def sink_state(path: Path) -> tuple[object, object]:
    return (
        raw_rows(path, "SELECT id, receipts FROM inbox ORDER BY id"),
        raw_rows(path, "SELECT sku, qty FROM inventory ORDER BY sku"),
    )


def test_applied_then_duplicate(sink_app: InProcess, sink_db: Path) -> None:
    status, headers, body = post(sink_app, SNACK)
    assert (status, body) == (200, {"ack": True, "id": "snack-7", "status": "applied"})
    assert "idempotent-replayed" not in headers
    status, headers, body = post(sink_app, SNACK)
    assert (status, body) == (200, {"ack": True, "id": "snack-7", "status": "duplicate"})
    assert headers["idempotent-replayed"] == "true"
    assert sink_state(sink_db) == ([("snack-7", 2)], [("snack", 7)])


def test_conflict_is_422_problem_json_and_changes_nothing(
    sink_app: InProcess, sink_db: Path
) -> None:
    post(sink_app, SNACK)
    before = sink_state(sink_db)
    status, headers, body = post(sink_app, {**SNACK, "qty": 8})
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
    sink_app: InProcess, sink_db: Path, raw: bytes, field: str
) -> None:
    status, headers, body = sink_app.request("POST", "/events", raw)
    problem = json.loads(body)
    assert status == 400
    assert headers["content-type"].startswith("application/problem+json")
    assert problem["field"] == field
    assert field in problem["detail"]
    assert sink_state(sink_db) == ([], [])


def test_bodies_over_64_kib_are_413(sink_app: InProcess, sink_db: Path) -> None:
    big = json.dumps({**SNACK, "sku": "x" * 70_000}).encode()
    status, _, _ = sink_app.request("POST", "/events", big)
    assert status == 413
    # Also without a Content-Length (chunked): the cap applies to what arrives.
    assert sink_app.post_chunked("/events", [b"x" * 8192] * 10) == 413
    assert sink_state(sink_db) == ([], [])


def test_batch_applies_the_prefix_and_reports_the_first_error(
    sink_app: InProcess, sink_db: Path
) -> None:
    post(sink_app, {"id": "x", "sku": "tea", "qty": 1})
    items = [
        {"id": "a", "sku": "tea", "qty": 2},
        {"id": "x", "sku": "tea", "qty": 1},
        {"id": "x", "sku": "tea", "qty": 5},
        {"id": "b", "sku": "tea", "qty": 4},
    ]
    status, _, body = post(sink_app, items, "/events/batch")
    assert status == 200
    assert body["acks"] == [
        {"id": "a", "ack": True, "status": "applied"},
        {"id": "x", "ack": True, "status": "duplicate"},
    ]
    assert body["error"]["status"] == 422 and body["error"]["index"] == 2
    assert sink_state(sink_db)[1] == [("tea", 3)]


@pytest.mark.parametrize("payload", [[], {"id": "a"}, [{"id": "a", "sku": "s", "qty": 1}] * 17])
def test_batch_body_must_be_a_list_of_1_to_16(sink_app: InProcess, payload: object) -> None:
    status, _, body = post(sink_app, payload, "/events/batch")
    assert status == 400 and body["field"] == "body"


def test_receipts_health_and_metrics(sink_app: InProcess) -> None:
    post(sink_app, SNACK)
    post(sink_app, SNACK)
    post(sink_app, {**SNACK, "qty": 1})
    status, _, body = sink_app.request("GET", "/events/snack-7")
    assert status == 200 and json.loads(body)["receipts"] == 2
    assert sink_app.request("GET", "/events/never-sent")[0] == 404
    assert sink_app.request("GET", "/healthz")[0] == 200
    status, headers, text = sink_app.request("GET", "/metrics")
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
    spec = json.loads(sink_app.request("GET", "/openapi.json")[2])
    assert "/events" in spec["paths"]
