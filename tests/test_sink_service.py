"""The sink's app, asked in-process on a real SQLite file (tests/inprocess.py): every kind of
answer. The hot routes' bytes on the wire are checked through a real process in
tests/test_sink_fastpath.py."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ackledger import new_event
from ackledger.errors import Rejected
from ackledger.ops.processes import Service, start_service
from ackledger.sink.handler_tx import HandlerTransaction
from ackledger.sink.inbox import Inbox
from tests.conftest import raw_rows, stock_rows
from tests.events import SOURCE, lab
from tests.inprocess import InProcess

SNACK = lab("snack-7", "snack", 7)


def post(app: InProcess, payload: Any, path: str = "/events") -> tuple[int, dict[str, str], Any]:
    status, headers, body = app.request("POST", path, json.dumps(payload).encode())
    return status, headers, json.loads(body)


def sink_state(path: Path) -> tuple[object, object]:
    return (
        raw_rows(path, "SELECT source, id, receipts FROM ackledger_inbox ORDER BY source, id"),
        stock_rows(path),
    )


def test_applied_then_duplicate(sink_app: InProcess, sink_db: Path) -> None:
    ack = {"ack": True, "id": "snack-7", "source": SOURCE}
    status, headers, body = post(sink_app, SNACK)
    assert (status, body) == (200, {**ack, "status": "applied"})
    assert "idempotent-replayed" not in headers
    status, headers, body = post(sink_app, SNACK)
    assert (status, body) == (200, {**ack, "status": "duplicate"})
    assert headers["idempotent-replayed"] == "true"
    assert sink_state(sink_db) == ([(SOURCE, "snack-7", 2)], [("snack", 7)])


def test_conflict_is_422_problem_json_and_changes_nothing(
    sink_app: InProcess, sink_db: Path
) -> None:
    post(sink_app, SNACK)
    before = sink_state(sink_db)
    status, headers, body = post(sink_app, lab("snack-7", "snack", 8))
    assert status == 422
    assert headers["content-type"].startswith("application/problem+json")
    assert body["status"] == 422 and "snack-7" in body["detail"] and body["title"]
    assert sink_state(sink_db) == before


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{not json", "body"),
        (b"", "body"),
        (b"[1, 2]", "body"),
        (b'"snack"', "body"),
        (json.dumps({**lab("a", "s", 3), "data": {"sku": "s"}}).encode(), "data.qty"),
        (json.dumps({**lab("a", "s", 3), "data": {"sku": "s", "qty": True}}).encode(), "data.qty"),
        (json.dumps({**lab("a", "s", 3), "data": {"sku": "s", "qty": "3"}}).encode(), "data.qty"),
        (json.dumps({**lab("a", "s", 3), "id": "a\tb"}).encode(), "id"),
        (
            json.dumps({**lab("a", "s", 3), "data": {"sku": "s", "qty": 3, "note": 1}}).encode(),
            "data.note",
        ),
        (
            json.dumps({k: v for k, v in lab("a", "s", 3).items() if k != "source"}).encode(),
            "source",
        ),
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
    big = json.dumps({**SNACK, "data": {"sku": "snack", "qty": 7, "pad": "x" * 70_000}}).encode()
    status, _, _ = sink_app.request("POST", "/events", big)
    assert status == 413
    # Also without a Content-Length (chunked): the cap applies to what arrives.
    assert sink_app.post_chunked("/events", [b"x" * 8192] * 10) == 413
    assert sink_state(sink_db) == ([], [])


def test_batch_applies_the_prefix_and_reports_the_first_error(
    sink_app: InProcess, sink_db: Path
) -> None:
    post(sink_app, lab("x", "tea", 1))
    items = [lab("a", "tea", 2), lab("x", "tea", 1), lab("x", "tea", 5), lab("b", "tea", 4)]
    status, _, body = post(sink_app, items, "/events/batch")
    assert status == 200
    assert body["acks"] == [
        {"id": "a", "source": SOURCE, "ack": True, "status": "applied"},
        {"id": "x", "source": SOURCE, "ack": True, "status": "duplicate"},
    ]
    assert body["error"]["status"] == 422 and body["error"]["index"] == 2
    assert sink_state(sink_db)[1] == [("tea", 3)]


@pytest.mark.parametrize("payload", [lab("a", "s", 1), [lab("a", "s", 1)] * 17])
def test_batch_body_must_be_a_list_of_0_to_16(sink_app: InProcess, payload: object) -> None:
    status, _, body = post(sink_app, payload, "/events/batch")
    assert status == 400 and body["field"] == "body"


def test_an_empty_batch_is_200_with_no_acks(sink_app: InProcess, sink_db: Path) -> None:
    assert post(sink_app, [], "/events/batch")[::2] == (200, {"acks": []})
    assert sink_state(sink_db) == ([], [])


@pytest.mark.parametrize("bad", [0, 2])
def test_an_invalid_item_refuses_the_whole_batch(
    sink_app: InProcess, sink_db: Path, bad: int
) -> None:
    items = [lab("a", "tea", 2), lab("b", "tea", 1), lab("c", "tea", 5)]
    items[bad] = {**items[bad], "id": "bad\nid"}
    status, headers, body = post(sink_app, items, "/events/batch")
    assert status == 400 and headers["content-type"].startswith("application/problem+json")
    assert (body["field"], body["index"]) == ("id", bad)
    assert sink_state(sink_db) == ([], [])
    status, _, body = post(sink_app, items[bad : bad + 1], "/events/batch")
    assert (status, body["field"], body["index"]) == (400, "id", 0)


def test_a_refusal_after_an_invalid_item_still_refuses_the_batch_whole(
    sink_app: InProcess, sink_db: Path
) -> None:
    unhandled = new_event("com.example.nobody", source="/x", id="u")
    items = [lab("a", "tea", 2), unhandled, {**lab("c", "tea", 5), "data": 5}]
    status, _, body = post(sink_app, items, "/events/batch")
    assert status == 400 and body["index"] == 2
    assert sink_state(sink_db) == ([], [])


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/events", "application/cloudevents+avro"),
        ("/events", "text/plain"),
        ("/events", "application/cloudevents+json; charset=latin-1"),
        ("/events/batch", "application/cloudevents-batch+protobuf"),
        ("/events/batch", "application/cloudevents+json"),
    ],
)
def test_an_unsupported_media_type_is_415(
    sink_app: InProcess, sink_db: Path, path: str, content_type: str
) -> None:
    body = json.dumps(lab("a", "tea", 2) if path == "/events" else [lab("a", "tea", 2)])
    status, headers, raw = sink_app.request(
        "POST", path, body.encode(), headers={"Content-Type": content_type}
    )
    problem = json.loads(raw)
    assert status == 415 and headers["content-type"].startswith("application/problem+json")
    assert problem["field"] == "content-type" and problem["status"] == 415
    assert sink_state(sink_db) == ([], [])


def test_receipts_health_and_metrics(sink_app: InProcess) -> None:
    post(sink_app, SNACK)
    post(sink_app, SNACK)
    post(sink_app, lab("snack-7", "snack", 1))
    status, _, body = sink_app.request("GET", "/events/snack-7")
    receipt = json.loads(body)
    assert status == 200 and receipt["receipts"] == 2
    assert (receipt["source"], receipt["type"]) == (SOURCE, "warehouse.stock.added")
    assert sink_app.request("GET", "/events/never-sent")[0] == 404
    assert sink_app.request("GET", "/healthz")[0] == 200
    status, headers, text = sink_app.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if sample.labels == {"scope": "database"}
    }
    assert samples["ackledger_sink_applied_total"] == 1
    assert samples["ackledger_sink_duplicates_total"] == 1
    assert samples["ackledger_sink_conflicts_total"] == 1
    spec = json.loads(sink_app.request("GET", "/openapi.json")[2])
    assert "/events" in spec["paths"]


# --- v2: handlers of the user's types, the refusals they cause, the content types -----------

NOTED = "com.example.note.kept"
REJECTING = "com.example.note.rejected"
FAILING = "com.example.note.failing"


def note(kind: str, event_id: str) -> dict[str, Any]:
    return new_event(kind, {"text": event_id}, source="/notes", id=event_id)


def _write_note(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    tx.execute("INSERT INTO notes (id, text) VALUES (?, ?)", (event["id"], event["data"]["text"]))


def _reject(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    _write_note(tx, event)  # written first: the refusal must undo it
    raise Rejected(f"note {event['id']} can never be kept")


def _fail(tx: HandlerTransaction, event: dict[str, Any]) -> None:
    _write_note(tx, event)
    raise RuntimeError("the notes service is down")


@pytest.fixture
def notes_app(sink_db: Path) -> Iterator[InProcess]:
    """The sink's app (``inbox.asgi()``) with handlers of three user types, on ``sink_db``."""
    handlers = {NOTED: _write_note, REJECTING: _reject, FAILING: _fail}
    with Inbox(sink_db, handlers=handlers) as inbox:
        setup = sqlite3.connect(sink_db)
        setup.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, text TEXT NOT NULL)")
        setup.commit()
        setup.close()
        # The in-process client's Host is "testserver": a name the mount must be told of.
        with InProcess(inbox.asgi(allowed_hosts=["testserver"])) as app:
            yield app


def notes_state(path: Path) -> tuple[object, object, object]:
    """The inbox, the notes and the inventory, read on a connection of the test's own."""
    return (
        raw_rows(path, "SELECT source, id, type FROM ackledger_inbox ORDER BY source, id"),
        raw_rows(path, "SELECT id, text FROM notes ORDER BY id"),
        stock_rows(path),
    )


def test_a_handled_user_type_is_applied_in_the_inbox_transaction(
    notes_app: InProcess, sink_db: Path
) -> None:
    status, _, body = post(notes_app, note(NOTED, "n1"))
    assert (status, body) == (
        200,
        {"ack": True, "id": "n1", "source": "/notes", "status": "applied"},
    )
    assert notes_state(sink_db) == ([("/notes", "n1", NOTED)], [("n1", "n1")], [])


@pytest.mark.parametrize(
    ("kind", "status", "problem_type"),
    [
        ("com.example.nobody.handles.this", 422, "/no-handler"),
        (REJECTING, 422, "/rejected"),
        (FAILING, 503, "/handler-failed"),
    ],
)
def test_a_refused_event_is_answered_by_kind_and_records_nothing(
    notes_app: InProcess, sink_db: Path, kind: str, status: int, problem_type: str
) -> None:
    got, headers, body = post(notes_app, note(kind, "n2"))
    assert got == status
    assert headers["content-type"].startswith("application/problem+json")
    assert body["status"] == status and body["type"].endswith(problem_type)
    # Only a transient failure says when to come back.
    assert ("retry-after" in headers) == (status == 503)
    if status == 503:
        assert int(headers["retry-after"]) >= 1
    assert notes_state(sink_db) == ([], [], [])
    # The caller has the answer and keeps the event: the sink keeps no refused message.
    assert raw_rows(sink_db, "SELECT count(*) FROM ackledger_refused") == [(0,)]
    # Nothing was recorded: the same identity is still free for an event that can be kept.
    assert post(notes_app, note(NOTED, "n2"))[0] == 200
    assert notes_state(sink_db) == ([("/notes", "n2", NOTED)], [("n2", "n2")], [])


@pytest.mark.parametrize(
    ("raw", "headers", "named"),
    [
        # v1's flat body, declared as a CloudEvent: the envelope's first missing attribute.
        (json.dumps({"id": "a", "sku": "s", "qty": 3}).encode(), {}, "specversion"),
        # A CloudEvent declared as plain JSON, without ce-* headers: the content type.
        (
            json.dumps(lab("a", "s", 3)).encode(),
            {"Content-Type": "application/json"},
            "Content-Type",
        ),
        (json.dumps(lab("a", "s", 3)).encode(), {"Content-Type": "text/plain"}, "Content-Type"),
        (
            json.dumps([lab("a", "s", 3)]).encode(),
            {"Content-Type": "application/cloudevents-batch+json"},
            "Content-Type",
        ),
    ],
)
def test_a_v1_body_or_a_wrong_content_type_is_refused_naming_it(
    sink_app: InProcess, sink_db: Path, raw: bytes, headers: dict[str, str], named: str
) -> None:
    status, answer_headers, body = sink_app.request("POST", "/events", raw, headers)
    problem = json.loads(body)
    # A body of another media type than a CloudEvent's is 415; an invalid event, 400.
    assert status == (415 if named == "Content-Type" else 400)
    assert answer_headers["content-type"].startswith("application/problem+json")
    assert named.lower() in problem["detail"].lower()
    assert sink_state(sink_db) == ([], [])


def test_a_batch_of_the_wrong_content_type_is_415(sink_app: InProcess, sink_db: Path) -> None:
    raw = json.dumps([lab("a", "s", 3)]).encode()
    for declared in ("application/json", "application/cloudevents+json"):
        status, _, body = sink_app.request("POST", "/events/batch", raw, {"Content-Type": declared})
        assert status == 415 and "content-type" in json.loads(body)["detail"].lower()
    assert sink_state(sink_db) == ([], [])


@pytest.mark.parametrize(
    ("failing", "status", "problem_type"),
    [
        (note("com.example.nobody.handles.this", "n3"), 422, "/no-handler"),
        (note(REJECTING, "n3"), 422, "/rejected"),
        (note(FAILING, "n3"), 503, "/handler-failed"),
    ],
)
def test_a_batch_error_carries_the_status_the_item_would_have_had_alone(
    notes_app: InProcess,
    sink_db: Path,
    failing: dict[str, Any],
    status: int,
    problem_type: str,
) -> None:
    items = [note(NOTED, "n1"), lab("t1", "tea", 2), failing, note(NOTED, "n4")]
    got, _, body = post(notes_app, items, "/events/batch")
    assert got == 200
    assert body["acks"] == [
        {"id": "n1", "source": "/notes", "ack": True, "status": "applied"},
        {"id": "t1", "source": SOURCE, "ack": True, "status": "applied"},
    ]
    error = body["error"]
    assert (error["status"], error["index"]) == (status, 2)
    assert error["type"].endswith(problem_type)
    # The prefix is applied; the failing item and the one after it are not.
    assert notes_state(sink_db) == (
        [("/notes", "n1", NOTED), (SOURCE, "t1", "warehouse.stock.added")],
        [("n1", "n1")],
        [("tea", 2)],
    )
    # Alone, the failing item is answered with that very status.
    assert post(notes_app, failing)[0] == status


def _receipt_of(service: Service, query: str) -> tuple[int, dict[str, Any]]:
    url = f"{service.base_url}/events/snack-7?{query}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_bad_source_in_the_receipt_query_is_400_on_either_database(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """The query's ``source`` is checked as an event's before it reaches the database: a NUL
    byte made PostgreSQL fail (500) where SQLite found nothing (404)."""
    db = str(tmp_path / "sink.db") if kind == "sqlite" else request.getfixturevalue("pg_url")
    with Inbox(db) as inbox:
        inbox.receive(SNACK)
    service = start_service(["serve", "sink", "--db", db, "--port", "0"])
    try:
        for bad in ("\x00", "a\x00b", "", "x" * 257):
            status, problem = _receipt_of(service, urllib.parse.urlencode({"source": bad}))
            assert (status, problem["status"], problem["field"]) == (400, 400, "source"), bad
        status, receipt = _receipt_of(service, urllib.parse.urlencode({"source": SOURCE}))
        assert status == 200 and receipt["id"] == "snack-7"
        assert _receipt_of(service, "source=%2Felsewhere")[0] == 404
    finally:
        service.stop()
