"""A client that leaves in the middle of its request body is no server error: the ledger
service and the console log nothing of it (real processes, a raw socket that hangs up)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ackledger import Outbox
from ackledger.ops.processes import Service, start_service

from .loopback import request

pytestmark = pytest.mark.slow


def _hang_up_mid_body(service: Service, path: str, content_type: str, auth: str = "") -> None:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: 500\r\n{auth}\r\n"
    )
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"case_id": "c", "wo')  # 20 of the 500 bytes promised
    # Closed: the server reads the end of the stream where the rest of the body should be.


def _quiet(log: Path) -> None:
    text = log.read_text()
    assert "ERROR" not in text and "Traceback" not in text, text


def test_the_ledger_logs_no_error_for_a_client_that_left(tmp_path: Path) -> None:
    log = tmp_path / "ledger.log"
    args = ["serve", "ledger", "--db", str(tmp_path / "ledger.db"), "--port", "0"]
    with start_service(args, stderr_path=log) as ledger:
        for path in ("/deliveries", "/deliveries/complete"):
            _hang_up_mid_body(ledger, path, "application/json")
        # Still serving, and the next request is answered as ever.
        body = {"case_id": "c", "work_id": "w", "pod_uid": "p", "mode": "idempotent"}
        assert request(ledger, "POST", "/deliveries", json.dumps(body).encode())[0] == 201
    _quiet(log)


def test_the_console_logs_no_error_for_a_client_that_left(tmp_path: Path) -> None:
    source, token = tmp_path / "source.db", tmp_path / "console.token"
    Outbox(source).close()
    token.write_text("console-token-for-a-hang-up-test\n")
    log = tmp_path / "console.log"
    args = ["console", "--source", str(source), "--port", "0", "--token-file", str(token)]
    with start_service(args, stderr_path=log) as console:
        bearer = "Authorization: Bearer console-token-for-a-hang-up-test\r\n"
        form = "application/x-www-form-urlencoded"
        _hang_up_mid_body(console, "/quarantine", form, bearer)
        _hang_up_mid_body(console, "/requeue", form)
        assert request(console, "GET", "/", None, {})[0] == 200
    _quiet(log)
