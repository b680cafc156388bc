"""CONTRACT v2 section 9 on real service processes: the loopback Host check (DNS rebinding),
bearer tokens, no bind beyond loopback without one, and one reading of singleton headers."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackledger import send_http
from ackledger.errors import NotAcknowledged
from ackledger.ledger.client import request_delivery
from ackledger.ledger.ledger import check_request
from ackledger.ops.processes import Service, run_cli, start_service
from ackledger.web.metrics_endpoint import MetricsEndpoint
from ackledger.wire.sender import sender
from tests.events import lab

TOKEN = "t0ken-of-this-test.A1b2C3d4"


def _ask(
    service: Service,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly the headers given (repeats allowed; no Host unless given)."""
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers or []:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def stock_event(event_id: str, sku: str = "tok", qty: int = 1) -> dict[str, Any]:
    return lab(event_id, sku, qty)


def _event_body(event_id: str) -> bytes:
    return json.dumps(stock_event(event_id, sku="rebind", qty=1)).encode()


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


def _serve(
    factory: pytest.TempPathFactory, service: str, token_file: Path | None = None
) -> Iterator[Service]:
    """``serve SERVICE`` on loopback, with a token or without (the Host check alone)."""
    where = factory.mktemp(f"{service}-{'token' if token_file else 'open'}")
    args = ["serve", service, "--db", str(where / "db.sqlite"), "--port", "0"]
    if token_file is not None:
        args += ["--token-file", str(token_file)]
    with start_service(args, stderr_path=where / "stderr.log") as running:
        yield running


@pytest.fixture(scope="module")
def open_sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _serve(tmp_path_factory, "sink")


@pytest.fixture(scope="module")
def open_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _serve(tmp_path_factory, "ledger")


@pytest.fixture(scope="module")
def token_sink(tmp_path_factory: pytest.TempPathFactory, token_file: Path) -> Iterator[Service]:
    yield from _serve(tmp_path_factory, "sink", token_file)


@pytest.fixture(scope="module")
def token_ledger(tmp_path_factory: pytest.TempPathFactory, token_file: Path) -> Iterator[Service]:
    yield from _serve(tmp_path_factory, "ledger", token_file)


def _host(service: Service, name: str = "127.0.0.1") -> tuple[str, str]:
    return ("Host", f"{name}:{service.port}")


CE = ("Content-Type", "application/cloudevents+json")
JSON = ("Content-Type", "application/json")


# -- the Host check (DNS rebinding) ------------------------------------------------------------


def test_a_rebound_name_is_misdirected_and_the_event_is_not_applied(open_sink: Service) -> None:
    evil = _host(open_sink, "attacker.invalid")
    status, _, body = _ask(open_sink, "POST", "/events", _event_body("rebind-1"), [evil, CE])
    assert status == 421, body
    assert json.loads(body)["status"] == 421
    status, _, _ = _ask(open_sink, "GET", "/events/rebind-1", None, [_host(open_sink)])
    assert status == 404  # never applied
    for path in ("/metrics", "/events/rebind-1", "/healthz"):
        assert _ask(open_sink, "GET", path, None, [evil])[0] == 421, path


def test_a_rebound_name_cannot_write_or_read_the_ledger(open_ledger: Service) -> None:
    evil = _host(open_ledger, "attacker.invalid")
    request = b'{"case_id":"rebind","work_id":"w","pod_uid":"p","mode":"idempotent"}'
    assert _ask(open_ledger, "POST", "/deliveries", request, [evil, JSON])[0] == 421
    assert _ask(open_ledger, "GET", "/deliveries", None, [evil])[0] == 421
    assert _ask(open_ledger, "GET", "/attempts", None, [evil])[0] == 421
    status, _, body = _ask(
        open_ledger, "GET", "/attempts?case_id=rebind", None, [_host(open_ledger)]
    )
    assert status == 200 and json.loads(body) == []


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]", "127.8.9.10"])
def test_loopback_names_are_served(open_sink: Service, name: str) -> None:
    assert (
        _ask(open_sink, "GET", "/healthz", None, [("Host", f"{name}:{open_sink.port}")])[0] == 200
    )
    assert _ask(open_sink, "GET", "/healthz", None, [("Host", name)])[0] == 200


@pytest.mark.parametrize(
    "host", ["attacker.invalid", "localhost.attacker.invalid", "10.0.0.1", "[::1", "127.0.0.1:x"]
)
def test_other_hosts_are_misdirected(open_sink: Service, host: str) -> None:
    assert _ask(open_sink, "GET", "/healthz", None, [("Host", host)])[0] == 421


# -- bearer tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"],
)
def test_a_missing_or_wrong_token_is_401_and_nothing_is_applied(
    token_sink: Service, authorization: str | None
) -> None:
    headers = [_host(token_sink), CE]
    if authorization is not None:
        headers.append(("Authorization", authorization))
    status, answer_headers, body = _ask(
        token_sink, "POST", "/events", _event_body("tok-refused"), headers
    )
    assert status == 401
    assert answer_headers["www-authenticate"].startswith('Bearer realm="ackledger"')
    assert answer_headers["content-type"] == "application/problem+json"
    assert json.loads(body)["status"] == 401 and TOKEN.encode() not in body
    auth = [("Authorization", f"Bearer {TOKEN}")]
    assert (
        _ask(token_sink, "GET", "/events/tok-refused", None, [_host(token_sink), *auth])[0] == 404
    )
    # Reading needs it too; only the probes do not.
    assert _ask(token_sink, "GET", "/metrics", None, [_host(token_sink)])[0] == 401
    assert _ask(token_sink, "GET", "/healthz", None, [_host(token_sink)])[0] == 200


def test_the_right_token_is_served_and_never_logged(token_sink: Service) -> None:
    event = stock_event("tok-right", sku="tok", qty=2)
    assert send_http(event, token_sink.base_url + "/events", token=TOKEN) is True
    wire = sender(token_sink.base_url + "/events", token=TOKEN)
    try:
        assert wire.send_batch([stock_event("tok-batch", sku="tok", qty=1)]) == 1
    finally:
        wire.close()
    auth = ("Authorization", f"bearer {TOKEN}")  # the scheme is case-insensitive
    assert _ask(token_sink, "GET", "/events/tok-right", None, [_host(token_sink), auth])[0] == 200
    with pytest.raises(NotAcknowledged) as refused:
        send_http(stock_event("tok-none"), token_sink.base_url + "/events")
    assert refused.value.status == 401
    assert token_sink.log is not None
    assert TOKEN not in token_sink.log.read_text()


@pytest.mark.slow
def test_clients_carry_the_token_to_the_ledger(token_ledger: Service, token_file: Path) -> None:
    url = token_ledger.base_url + "/deliveries"
    req = check_request("tok-case", "w1", "pod", "idempotent", None)
    with pytest.raises(NotAcknowledged) as refused:
        request_delivery(url, req)
    assert refused.value.status == 401
    assert request_delivery(url, req, token=TOKEN)["duplicate"] is False
    result = run_cli(
        "deliver", "--ledger", url, "--case-id", "tok-case", "--work-id", "w1",
        "--token-file", str(token_file),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["duplicate"] is True
    assert TOKEN not in result.stdout + result.stderr
    without = run_cli("deliver", "--ledger", url, "--case-id", "tok-case", "--work-id", "w2")
    assert without.returncode != 0 and TOKEN not in without.stderr


@pytest.mark.slow
def test_status_reads_a_tokened_service(
    token_sink: Service, token_file: Path, tmp_path: Path
) -> None:
    source = tmp_path / "outbox.db"
    assert run_cli("migrate", "--target", str(source)).returncode == 0
    args = ["status", "--source", str(source), "--sink", token_sink.base_url, "--json"]
    refused = json.loads(run_cli(*args).stdout)["sink"]
    assert "401" in refused["error"]
    read = json.loads(run_cli(*args, "--token-file", str(token_file)).stdout)["sink"]
    assert "error" not in read and "applied" in read


# -- binding beyond loopback ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("service", ["sink", "ledger"])
def test_binding_beyond_loopback_without_a_token_is_refused(tmp_path: Path, service: str) -> None:
    db = tmp_path / "x.db"
    result = run_cli("serve", service, "--db", str(db), "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--token-file" in result.stderr
    assert "Traceback" not in result.stderr and not db.exists()


@pytest.mark.slow
def test_insecure_no_token_warns_before_binding(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails after the warning,
    # so the test never listens beyond loopback.
    db = str(tmp_path / "x.db")
    args = ["serve", "sink", "--db", db, "--host", "192.0.2.1", "--port", "0"]
    result = run_cli(*args, "--insecure-no-token")
    assert result.returncode == 2
    warning, error = result.stderr.splitlines()
    assert "warning" in warning and "without a token" in warning
    assert "cannot listen" in error


@pytest.mark.slow
def test_a_bad_token_file_is_one_line_without_its_content(tmp_path: Path) -> None:
    bad = tmp_path / "token"
    bad.write_text("secret with spaces\n")
    for path in (bad, tmp_path / "missing"):
        result = run_cli("serve", "sink", "--db", str(tmp_path / "x.db"), "--token-file", str(path))
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "secret" not in result.stderr and "--token-file" in result.stderr


# -- one reading of singleton headers ---------------------------------------------------------


def test_two_content_types_are_refused_by_both_services(
    open_sink: Service, open_ledger: Service
) -> None:
    two = [CE, ("Content-Type", "application/json")]
    status, _, body = _ask(
        open_sink, "POST", "/events", _event_body("dup-ct"), [_host(open_sink), *two]
    )
    assert status == 400 and json.loads(body)["field"] == "content-type"
    assert _ask(open_sink, "GET", "/events/dup-ct", None, [_host(open_sink)])[0] == 404
    request = b'{"case_id":"dup-ct","work_id":"w","pod_uid":"p","mode":"idempotent"}'
    both = [_host(open_ledger), JSON, ("Content-Type", "text/plain")]
    status, _, body = _ask(open_ledger, "POST", "/deliveries", request, both)
    assert status == 400 and json.loads(body)["field"] == "content-type"
    status, _, body = _ask(
        open_ledger, "GET", "/attempts?case_id=dup-ct", None, [_host(open_ledger)]
    )
    assert json.loads(body) == []


@pytest.mark.parametrize("name", ["Authorization", "Idempotency-Key", "Host"])
def test_other_singleton_headers_given_twice_are_refused(open_ledger: Service, name: str) -> None:
    headers = [_host(open_ledger), JSON, (name, "localhost"), (name, "127.0.0.1")]
    if name == "Host":
        headers = headers[1:]
    request = b'{"case_id":"dup-h","work_id":"w","pod_uid":"p","mode":"idempotent"}'
    status, _, body = _ask(open_ledger, "POST", "/deliveries", request, headers)
    assert status == 400 and json.loads(body)["field"] == name.lower()


def test_the_relays_and_consumers_metrics_port_refuses_a_rebound_name() -> None:
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    class One(Collector):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            yield GaugeMetricFamily("ackledger_test_one", "one", value=1)

    endpoint = MetricsEndpoint(One(), "127.0.0.1", 0, component="test")
    try:
        for host, expected in (("attacker.invalid", 421), ("localhost", 200)):
            conn = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=10)
            conn.request("GET", "/metrics", headers={"Host": f"{host}:{endpoint.port}"})
            response = conn.getresponse()
            body = response.read()
            conn.close()
            assert response.status == expected
            assert (b"ackledger_test_one" in body) == (expected == 200)
    finally:
        endpoint.close()
