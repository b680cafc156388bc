"""The sink's POST routes on a real ``serve sink`` over raw sockets: the connection's rules
(keep-alive, ``Connection: close``, HTTP/1.0, pipelining, a client that leaves mid-body or
after submitting), ``Expect`` and a chunked body, the front door, the histogram and the access
log, and a graceful stop."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger import new_event
from ackledger.ops.processes import Service, start_service
from tests.events import SOURCE, lab

pytestmark = pytest.mark.slow

SLOW_HANDLERS = """
import pathlib, time

def slow(tx, event):
    pathlib.Path(event["data"]["marker"]).write_text("started")
    time.sleep(float(event["data"]["seconds"]))

HANDLERS = {"com.example.slow": slow}
"""
TOKEN = "sink-connections-token.9f8e7d"

Answer = tuple[int, dict[bytes, bytes], bytes]


def _head(path: str, body: bytes, *extra: str, version: str = "1.1") -> bytes:
    lines = [
        f"POST {path} HTTP/{version}",
        "Host: 127.0.0.1",
        "Content-Type: application/cloudevents+json",
        f"Content-Length: {len(body)}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _post(path: str, body: bytes, *extra: str, version: str = "1.1") -> bytes:
    return _head(path, body, *extra, version=version) + body


def _event(event_id: str) -> bytes:
    return json.dumps(lab(event_id, "s1", 1)).encode()


class _Reader:
    """Answers read off a socket one by one: status, headers (names as sent), body."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        sock.settimeout(20)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "the server closed the connection before the answer was complete"
        self.buffer += chunk

    def answer(self) -> Answer:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.split(b"\r\n")
        headers = dict(line.split(b": ", 1) for line in lines)
        length = int(headers.get(b"content-length", b"0"))
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split(b" ")[1]), headers, body

    def closed(self) -> bool:
        """Did the server close the connection (with nothing more to read)?"""
        try:
            return self.buffer == b"" and self.sock.recv(65536) == b""
        except TimeoutError:
            return False


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Service]:
    (tmp_path / "slow_events.py").write_text(SLOW_HANDLERS, encoding="utf-8")
    args = ["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0"]
    args += ["--handlers", "slow_events:HANDLERS", "--access-log", "--log-format", "json"]
    env = {"PYTHONPATH": str(tmp_path)}
    with start_service(args, env=env, stderr_path=tmp_path / "sink.log") as running:
        yield running


def _connect(service: Service) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.port))


def _get(service: Service, path: str, *extra: str) -> Answer:
    with _connect(service) as sock:
        lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *extra]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return _Reader(sock).answer()


def _receipt_status(service: Service, event_id: str, source: str = SOURCE, *extra: str) -> int:
    return _get(service, f"/events/{event_id}?source={source}", *extra)[0]


def _slow(event_id: str, marker: Path, seconds: float) -> bytes:
    data = {"marker": str(marker), "seconds": seconds}
    return json.dumps(new_event("com.example.slow", data, source="/slow", id=event_id)).encode()


def test_pipelined_requests_are_answered_in_order(sink: Service, tmp_path: Path) -> None:
    """A slow event (its commit waits 0.4 s), a refusal answered at once, a GET, a POST with
    a query string, and a duplicate, in one write: five answers in their order."""
    marker = tmp_path / "started"
    with _connect(sink) as sock:
        sock.sendall(
            _post("/events", _slow("slow-1", marker, 0.4))
            + _post("/events", b"not json")
            + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            + _post("/events?via=query", _event("p-2"))
            + _post("/events", _slow("slow-1", marker, 0.4))
        )
        reader = _Reader(sock)
        answers = [reader.answer() for _ in range(5)]
    assert [status for status, _, _ in answers] == [200, 400, 200, 200, 200]
    assert json.loads(answers[0][2])["status"] == "applied"
    assert json.loads(answers[2][2])["status"] == "ok"
    assert json.loads(answers[3][2])["id"] == "p-2"
    assert json.loads(answers[4][2])["status"] == "duplicate"


def test_connection_close_and_http_1_0_close_after_the_answer(sink: Service) -> None:
    for request in (
        _post("/events", _event("c-1"), "Connection: close"),
        _post("/events", _event("c-2"), version="1.0"),
        _post("/events", _event("c-3"), "Connection: keep-alive", version="1.0"),
    ):
        with _connect(sink) as sock:
            sock.sendall(request)
            reader = _Reader(sock)
            status, headers, _ = reader.answer()
            assert status == 200 and headers[b"connection"] == b"close"
            assert reader.closed()
    with _connect(sink) as sock:  # HTTP/1.1 without it: kept alive, no such header
        reader = _Reader(sock)
        for _ in range(2):
            sock.sendall(_post("/events", _event("c-4")))
            status, headers, _ = reader.answer()
            assert status == 200 and b"connection" not in headers


def test_a_client_gone_mid_body_applies_nothing(sink: Service) -> None:
    """The whole event's JSON arrives, but not the last bytes its Content-Length declares:
    the request was never complete, so nothing is applied."""
    body = _event("gone-1")
    with _connect(sink) as sock:
        sock.sendall(_head("/events", body + b"    ") + body)
        time.sleep(0.3)
    time.sleep(0.3)
    assert _receipt_status(sink, "gone-1") == 404
    with _connect(sink) as sock:  # the server is fine, and the event applies when sent
        sock.sendall(_post("/events", body))
        assert _Reader(sock).answer()[0] == 200
    assert _receipt_status(sink, "gone-1") == 200


def test_a_client_gone_after_submitting_is_applied(sink: Service, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with _connect(sink) as sock:
        sock.sendall(_post("/events", _slow("left-1", marker, 0.5)))
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists()
    # Closed while its commit was under way: applied, the answer dropped.
    deadline = time.monotonic() + 10
    while _receipt_status(sink, "left-1", "/slow") != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _receipt_status(sink, "left-1", "/slow") == 200
    assert "Traceback" not in (tmp_path / "sink.log").read_text()


def test_expect_100_continue_and_a_chunked_body_are_answered(sink: Service) -> None:
    body = _event("x-1")
    with _connect(sink) as sock:
        reader = _Reader(sock)
        sock.sendall(_head("/events", body, "Expect: 100-continue"))
        assert reader.answer()[0] == 100  # asked for the body, as uvicorn does
        sock.sendall(body)
        status, _, answer = reader.answer()
        assert status == 200 and json.loads(answer)["status"] == "applied"
        chunked = (
            b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/cloudevents+json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        body = _event("x-2")
        sock.sendall(chunked + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        status, _, answer = reader.answer()
        assert status == 200 and json.loads(answer)["id"] == "x-2"


def test_the_histogram_and_the_access_log_see_the_post_answers(
    sink: Service, tmp_path: Path
) -> None:
    with _connect(sink) as sock:
        reader = _Reader(sock)
        for request in (_post("/events", _event("h-1")), _post("/events", b"{")):
            sock.sendall(request)
            reader.answer()
        sock.sendall(_post("/events/batch", b"[]"))  # a structured Content-Type: 415
        assert reader.answer()[0] == 415
    text = _get(sink, "/metrics")[2].decode()
    for route, status in (("/events", 200), ("/events", 400), ("/events/batch", 415)):
        series = f'_count{{method="POST",route="{route}",status="{status}"}} 1.0'
        assert f"ackledger_http_request_duration_seconds{series}" in text
    lines = (tmp_path / "sink.log").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    access = [
        (r["method"], r["path"], r["status"])
        for r in records
        if r.get("logger") == "ackledger.access" and r["method"] == "POST"
    ]
    assert access == [
        ("POST", "/events", 200),
        ("POST", "/events", 400),
        ("POST", "/events/batch", 415),
    ]


@pytest.fixture
def token_sink(tmp_path: Path) -> Iterator[Service]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ["serve", "sink", "--db", str(tmp_path / "t.db"), "--port", "0"]
    with start_service([*args, "--token-file", str(token_file)]) as running:
        yield running


def test_the_guard_refuses_a_post_and_keeps_the_connection(
    token_sink: Service,
) -> None:
    body = _event("g-1")
    auth = f"Authorization: Bearer {TOKEN}"
    with _connect(token_sink) as sock:
        reader = _Reader(sock)
        sock.sendall(_post("/events", body))
        status, headers, _ = reader.answer()
        assert status == 401 and headers[b"www-authenticate"] == b'Bearer realm="ackledger"'
        sock.sendall(_post("/events", body, "Authorization: Bearer wrong"))
        status, headers, _ = reader.answer()
        assert status == 401 and b"invalid_token" in headers[b"www-authenticate"]
        sock.sendall(_post("/events", body, auth, "Host: evil.example"))
        assert reader.answer()[0] == 400  # Host given twice
        sock.sendall(_post("/events", body, auth).replace(b"127.0.0.1", b"rebound.example"))
        assert reader.answer()[0] == 421
        assert _receipt_status(token_sink, "g-1", SOURCE, auth) == 404  # nothing applied
        sock.sendall(_post("/events", body, auth))
        status, _, answer = reader.answer()
        assert status == 200 and json.loads(answer)["status"] == "applied"
    # A refused request reaches neither the route nor its timing (the Guard is outside
    # both): the histogram has the one 200 and no series of any refusal.
    text = _get(token_sink, "/metrics", auth)[2].decode()
    posts = [line for line in text.splitlines() if "_count{" in line and 'method="POST"' in line]
    assert posts == [
        'ackledger_http_request_duration_seconds_count{method="POST",route="/events",'
        'status="200"} 1.0'
    ]


def test_sigterm_answers_the_request_in_flight_and_closes_its_connection(
    tmp_path: Path,
) -> None:
    """A kept-alive connection whose request is half sent when SIGTERM arrives: the rest is
    still read and the event applied, the answer says ``connection: close``, the connection
    is closed, and the process exits 0."""
    args = ["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0"]
    sink = start_service(args)
    try:
        with _connect(sink) as sock:
            reader = _Reader(sock)
            sock.sendall(_post("/events", _event("k-1")))
            assert reader.answer()[0] == 200  # kept alive so far
            request = _post("/events", _event("k-2"))
            sock.sendall(request[:-20])
            time.sleep(0.2)
            sink.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)  # uvicorn's shutdown has told the connection (after 0.1 s)
            sock.sendall(request[-20:])
            status, headers, answer = reader.answer()
            assert status == 200 and json.loads(answer)["status"] == "applied"
            assert headers[b"connection"] == b"close"
            assert reader.closed()
        assert sink.process.wait(20) == 0
    finally:
        sink.stop()


_SERIES = re.compile(
    r'ackledger_http_request_duration_seconds_(bucket|count|sum)\{(?:le="([^"]+)",)?'
    r'method="POST",route="/events",status="(\d+)"\} (\S+)'
)


@pytest.fixture
def quiet_sink(tmp_path: Path) -> Iterator[Service]:
    """A sink without the access log, with a handler that takes the time it is told."""
    (tmp_path / "slow_events.py").write_text(SLOW_HANDLERS, encoding="utf-8")
    args = ["serve", "sink", "--db", str(tmp_path / "sink.db"), "--port", "0"]
    args += ["--handlers", "slow_events:HANDLERS"]
    with start_service(args, env={"PYTHONPATH": str(tmp_path)}) as running:
        yield running


def _histogram(service: Service) -> dict[str, dict[str, float]]:
    """status -> {"count", "sum", and each bucket's bound}, for POST /events."""
    found: dict[str, dict[str, float]] = {}
    for kind, bound, status, value in _SERIES.findall(_get(service, "/metrics")[2].decode()):
        found.setdefault(status, {})[bound or kind] = float(value)
    return found


def test_each_answer_is_counted_once_in_its_status_series(
    quiet_sink: Service, tmp_path: Path
) -> None:
    slow = _slow("t-2", tmp_path / "marker", 0.3)
    started = time.perf_counter()
    with _connect(quiet_sink) as sock:
        reader = _Reader(sock)
        # 200, 200 (a duplicate), 400, 200 (0.3 s), 400, 200: the series of 200 is made by
        # the first and held for the others; the 400's is another, made by its own first.
        for body in (_event("t-1"), _event("t-1"), b"{", slow, b"[", _event("t-3")):
            sock.sendall(_post("/events", body))
            reader.answer()
    elapsed = time.perf_counter() - started
    histogram = _histogram(quiet_sink)
    assert set(histogram) == {"200", "400"}  # no series of a status never answered
    for status, count in (("200", 4), ("400", 2)):
        series = histogram[status]
        assert series["count"] == count and series["+Inf"] == count
        bounds = sorted((float(bound), n) for bound, n in series.items() if bound[0].isdigit())
        assert [n for _, n in bounds] == sorted(n for _, n in bounds)  # cumulative
        # The sum is the answers' own times: less than the whole run's, and the 200s' has
        # the slow one's 0.3 s (answered after its series was made).
        assert (0.3 if status == "200" else 0) < series["sum"] < elapsed


def test_http_1_0_kept_alive_by_proxy_connection_is_still_closed(quiet_sink: Service) -> None:
    with _connect(quiet_sink) as sock:
        sock.sendall(_post("/events", _event("v-1"), "Proxy-Connection: keep-alive", version="1.0"))
        reader = _Reader(sock)
        status, headers, _ = reader.answer()
        assert status == 200 and headers[b"connection"] == b"close"
        assert reader.closed()
