"""The sink service and the source commands on every backend (real processes, loopback)."""

from __future__ import annotations

import http.client
import json
from functools import partial
from pathlib import Path

from ackledger import send_http
from ackledger.ops.processes import run_cli, start_service

from ..events import SOURCE, lab
from ..race import Answer, Client, at_once, connected
from .conftest import Target

#: CloudEvents structured mode (CONTRACT section 6).
STRUCTURED = "application/cloudevents+json"


def post(
    base_url: str, body: bytes, content_type: str = STRUCTURED
) -> tuple[int, dict[str, str], object]:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", "/events", body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, headers, json.loads(response.read())
    finally:
        conn.close()


def test_sink_service_answers_per_contract(target: Target, tmp_path: Path) -> None:
    args = ["serve", "sink", "--db", target.ref, "--port", "0"]
    with start_service(args, stderr_path=tmp_path / "sink.log") as sink:
        event = lab("e1", "apple", 4)
        assert send_http(event, sink.base_url + "/events") is True
        status, headers, body = post(sink.base_url, json.dumps(event).encode())
        assert (status, body) == (
            200,
            {"ack": True, "id": "e1", "source": SOURCE, "status": "duplicate"},
        )
        assert headers.get("idempotent-replayed") == "true"
        other = lab("e1", "apple", 5)
        status, _, problem = post(sink.base_url, json.dumps(other).encode())
        assert status == 422
        missing = {**lab("e2", "apple", 1), "data": {"sku": "apple"}}
        status, _, problem = post(sink.base_url, json.dumps(missing).encode())
        assert status == 400
        assert isinstance(problem, dict) and problem.get("field") == "data.qty"
        # A structured event under another media type is refused, and changes nothing.
        status, _, problem = post(
            sink.base_url, json.dumps(lab("e3", "apple", 1)).encode(), "text/plain"
        )
        assert status == 415
    assert target.rows("SELECT sku, qty FROM inventory") == [("apple", 4)]
    assert target.rows("SELECT source, id, receipts FROM ackledger_inbox") == [(SOURCE, "e1", 2)]


def test_accept_pending_dispatch_commands(target: Target, tmp_path: Path) -> None:
    for n in range(3):
        event = json.dumps({"id": f"e{n}", "sku": "apple", "qty": n + 1})
        done = run_cli("accept", "--source", target.ref, stdin=event)
        assert done.returncode == 0, done.stderr
    listed = run_cli("pending", "--source", target.ref, "--json")
    assert [item["id"] for item in json.loads(listed.stdout)] == ["e0", "e1", "e2"]
    sink_db = str(tmp_path / "sink.db")
    with start_service(["serve", "sink", "--db", sink_db, "--port", "0"]) as sink:
        done = run_cli("dispatch", "--source", target.ref, "--to", sink.base_url + "/events")
        assert done.returncode == 0, done.stderr
    assert "dispatched 3 event(s)" in done.stdout
    assert target.rows("SELECT COUNT(*) FROM ackledger_outbox WHERE sent = 0") == [(0,)]


def test_an_unreachable_postgres_is_one_line_and_exit_4() -> None:
    done = run_cli("pending", "--source", "postgresql://postgres@127.0.0.1:1/nothing")
    assert done.returncode == 4  # unreachable, not bad input: worth trying again
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("ackledger: error: database unavailable:")
    assert "Traceback" not in done.stderr


def post_event(event: dict[str, object], _: int, client: Client) -> Answer:
    """``POST /events`` in structured mode on the client's own connection."""
    body = json.dumps(event).encode()
    client.conn.request("POST", "/events", body=body, headers={"Content-Type": STRUCTURED})
    response = client.conn.getresponse()
    return response.status, response, json.loads(response.read())


def test_two_sink_processes_apply_one_event_once(target: Target, tmp_path: Path) -> None:
    """Replicas: two sinks on one database receive the same events at the same moment."""
    sinks = [
        start_service(
            ["serve", "sink", "--db", target.ref, "--port", "0"],
            stderr_path=tmp_path / f"sink-{name}.log",
        )
        for name in ("a", "b")
    ]
    clients = [Client(sinks[i % 2]) for i in range(32)]
    rounds = 4  # the first also fills each sink's connection pool
    try:
        for round_no in range(rounds):
            event = lab(f"e{round_no}", "apple", 3)
            answers = at_once(clients, partial(post_event, event), ready=connected)
            assert [status for status, _, _ in answers] == [200] * 32
            assert (
                sorted(body["status"] for _, _, body in answers) == ["applied"] + ["duplicate"] * 31
            )
            assert {(body["source"], body["id"]) for _, _, body in answers} == {
                (SOURCE, event["id"])
            }
    finally:
        for client in clients:
            client.close()
        for sink in sinks:
            sink.stop()
    assert target.rows("SELECT sku, qty FROM inventory") == [("apple", 3 * rounds)]
    assert target.rows("SELECT id, receipts FROM ackledger_inbox ORDER BY id") == [
        (f"e{n}", 32) for n in range(rounds)
    ]
    assert sorted(
        target.rows("SELECT name, value FROM ackledger_counters WHERE name LIKE ?", ("sink.%",))
    ) == [
        ("sink.applied", rounds),
        ("sink.arrival", 32 * rounds),
        ("sink.duplicate", 31 * rounds),
    ]
