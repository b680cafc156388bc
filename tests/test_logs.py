"""The services' logs: ``--access-log`` writes one line per request, ``--log-format json`` makes
every line a JSON object, and no header (so no token) ever reaches them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ackledger import new_event
from ackledger._dev.procs import run_cli, start_service

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
