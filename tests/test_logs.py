"""The services' logs: ``--access-log`` writes one line per request, ``--log-format json`` makes
every line a JSON object, and no header (so no token) ever reaches them."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from ackledger import new_event
from ackledger._core.logline import install
from ackledger.ops.processes import run_cli, start_service

from .loopback import request

SECRET = "tok-do-not-log-4f1c9a"


def _lab(event_id: str) -> bytes:
    event = new_event("warehouse.stock.added", {"sku": "tea", "qty": 1}, source="/wh", id=event_id)
    return json.dumps(event).encode()


def _served(tmp_path: Path, *flags: str) -> list[str]:
    """Serve a sink with ``flags``, make a few requests (each with a bearer header), stop it,
    and return its stderr lines."""
    log = tmp_path / "sink.log"
    args = ["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0", *flags]
    auth = {"Authorization": f"Bearer {SECRET}"}
    with start_service(args, stderr_path=log) as sink:
        assert request(sink, "POST", "/events", _lab("e-1"), auth)[0] == 200
        assert request(sink, "GET", "/events/e-1?source=/wh", None, auth)[0] == 200
        assert request(sink, "GET", "/no/such/route", None, auth)[0] == 404
    return log.read_text().splitlines()


@pytest.mark.slow
def test_json_access_lines_name_method_path_status_and_time_never_a_token(
    tmp_path: Path,
) -> None:
    lines = _served(tmp_path, "--access-log", "--log-format", "json", "--log-level", "info")
    records = [json.loads(line) for line in lines if line.startswith("{")]
    # Every line but the final "stopped" (printed, not logged) is one JSON object.
    assert len(records) == len(lines) - 1 and lines[-1] == "ackledger sink stopped"
    access = [r for r in records if r["logger"] == "ackledger.access"]
    assert [(r["method"], r["path"], r["status"]) for r in access] == [
        ("POST", "/events", 200),
        ("GET", "/events/e-1", 200),
        ("GET", "/no/such/route", 404),
    ]
    assert [r["route"] for r in access] == ["/events", "/events/{event_id}", "unmatched"]
    for record in access:
        assert {"ts", "level", "method", "path", "status", "duration_ms"} <= set(record)
        assert record["level"] == "info" and record["ts"].endswith("Z")
        assert isinstance(record["duration_ms"], float) and record["duration_ms"] >= 0
    assert any(r["logger"].startswith("uvicorn") for r in records)  # --log-level info
    text = "\n".join(lines)
    assert SECRET not in text and "authorization" not in text.lower()


@pytest.mark.slow
def test_without_access_log_requests_are_not_logged(tmp_path: Path) -> None:
    lines = _served(tmp_path)
    assert lines == ["ackledger sink stopped"]  # the default level is warning: nothing else


def test_an_unknown_log_format_is_refused_at_start(tmp_path: Path) -> None:
    done = run_cli("serve", "ledger", "--db", str(tmp_path / "l.db"), "--log-format", "xml")
    assert done.returncode == 2 and "--log-format" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "l.db").exists()


def _failing_request(logger_name: str, fmt: str) -> str:
    """What ``install``'s handler writes for an error logged with its exception, as uvicorn
    logs an app that raised ("Exception in ASGI application")."""
    stream = io.StringIO()
    logger = logging.getLogger(logger_name)
    install(logger, fmt, stream)

    def handle() -> None:
        raise LookupError("no row for order-1001")

    try:
        handle()
    except LookupError:
        logger.error("Exception in ASGI application", exc_info=True)
    return stream.getvalue()


def test_a_logged_exception_keeps_its_type_message_and_traceback_in_text() -> None:
    text = _failing_request("ackledger.test.text", "text")
    first, *rest = text.rstrip("\n").splitlines()
    assert "Exception in ASGI application" in first
    assert 'error="LookupError: no row for order-1001"' in first
    assert rest[0] == "Traceback (most recent call last):"
    assert any("in handle" in line for line in rest)
    assert rest[-1] == "LookupError: no row for order-1001"


def test_a_logged_exception_keeps_its_type_message_and_traceback_in_json() -> None:
    text = _failing_request("ackledger.test.json", "json")
    [line] = text.splitlines()  # one JSON object: the traceback is inside it
    record = json.loads(line)
    assert record["message"] == "Exception in ASGI application"
    assert record["error"] == "LookupError: no row for order-1001"
    assert record["traceback"].startswith("Traceback (most recent call last):")
    assert "in handle" in record["traceback"]
    assert record["traceback"].endswith("LookupError: no row for order-1001")


def test_a_line_without_an_exception_has_no_error_field() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("ackledger.test.plain")
    install(logger, "json", stream)
    logger.warning("all is well")
    assert set(json.loads(stream.getvalue())) == {"ts", "level", "logger", "event", "message"}
