"""SIGTERM (what Kubernetes sends) stops a service gracefully: the request in flight is
answered and committed, the process says "stopped" and exits 0 (not 143)."""

from __future__ import annotations

import http.client
import json
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from ackledger import new_event
from ackledger.ops.processes import start_service

SLOW_HANDLERS = """
import pathlib, time

def slow(tx, event):
    pathlib.Path(event["data"]["marker"]).write_text("started")
    time.sleep(1.5)
    tx.execute("INSERT INTO shipments (order_id) VALUES (?)", (event["id"],))

HANDLERS = {"com.example.order.slow": slow}
"""


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight_then_exits_0(tmp_path: Path) -> None:
    (tmp_path / "slow_events.py").write_text(SLOW_HANDLERS, encoding="utf-8")
    db = tmp_path / "sink.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE shipments (order_id TEXT PRIMARY KEY)")
    conn.close()
    marker = tmp_path / "handler-started"
    log = tmp_path / "sink.log"
    args = ["serve", "sink", "--db", str(db), "--port", "0", "--handlers", "slow_events:HANDLERS"]
    sink = start_service(args, env={"PYTHONPATH": str(tmp_path)}, stderr_path=log)
    event = new_event("com.example.order.slow", {"marker": str(marker)}, source="/orders", id="o-1")
    answers: list[object] = []

    def post() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", sink.port, timeout=30)
        try:
            body = json.dumps(event).encode()
            conn.request("POST", "/events", body, {"Content-Type": "application/cloudevents+json"})
            answer = conn.getresponse()
            answers.append((answer.status, json.loads(answer.read())["status"]))
        except Exception as exc:  # the test reads what happened below
            answers.append(exc)
        finally:
            conn.close()

    sender = threading.Thread(target=post)
    sender.start()
    deadline = time.monotonic() + 20
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the handler never started"
    sink.process.send_signal(signal.SIGTERM)  # while the handler is still working
    sender.join(30)
    assert answers == [(200, "applied")]  # the ACK arrived: the request was finished, not cut off
    assert sink.process.wait(20) == 0
    sink.stop()
    assert "ackledger sink stopped" in log.read_text()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:  # committed, on disk
        assert check.execute("SELECT order_id FROM shipments").fetchall() == [("o-1",)]
    check.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_idle_ledger_stops_with_exit_0_and_says_so(tmp_path: Path, sig: signal.Signals) -> None:
    log = tmp_path / "ledger.log"
    ledger = start_service(
        ["serve", "ledger", "--db", str(tmp_path / "l.db"), "--port", "0"], stderr_path=log
    )
    assert ledger.stop(sig) == 0
    assert "ackledger ledger stopped" in log.read_text()
    assert "Traceback" not in log.read_text()
