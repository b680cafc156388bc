from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from ackledger import NotAcknowledged, UnsafeTarget, send_http, send_http_batch, sender
from ackledger.envelope import canonical_json
from ackledger.wire import _llhttp, _stdlib
from ackledger.wire import http as wire_http
from ackledger.wire.http import close_connections
from tests.events import SOURCE, lab
from tests.rawserver import CutServer, RawServer, forbid_network, http_answer

EVENT = lab("snack-7", "snack", 7)
PARSERS = {"llhttp": _llhttp.read_answer, "stdlib": _stdlib.read_answer}


@pytest.fixture(autouse=True)
def fresh_connections() -> Iterator[None]:
    close_connections()
    yield
    close_connections()


@pytest.fixture(autouse=True, params=["llhttp", "stdlib"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with both answer parsers: httptools' llhttp and the http.client one."""
    monkeypatch.setattr(wire_http, "read_answer", PARSERS[request.param])
    return str(request.param)


def ack_for(body: bytes) -> bytes:
    event = json.loads(body)
    ack = {"ack": True, "id": event["id"], "source": event["source"]}
    return http_answer(200, json.dumps(ack).encode())


def test_exact_ack_returns_true_and_posts_the_event() -> None:
    with RawServer(ack_for) as server:
        assert send_http(EVENT, server.url) is True
        assert json.loads(server.requests[0]) == EVENT


def test_connections_are_kept_alive() -> None:
    with RawServer(ack_for) as server:
        for i in range(5):
            assert send_http({**EVENT, "id": f"e-{i}"}, server.url) is True
        assert server.connections == 1
        assert len(server.requests) == 5


def test_a_kept_connection_the_server_closed_is_replaced_before_sending() -> None:
    with RawServer(ack_for, close_after_answer=True) as server:
        assert send_http(EVENT, server.url) is True
        time.sleep(0.1)  # the server has closed the kept connection by now
        assert send_http({**EVENT, "id": "second"}, server.url) is True
        assert server.connections == 2
        assert len(server.requests) == 2  # each event sent exactly once, none retried


def answer_with(status: int, payload: object, headers: dict[str, str] | None = None) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return http_answer(status, body, headers)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (answer_with(200, {"ack": True, "id": "other-id", "source": SOURCE}), "other-id"),
        (answer_with(200, {"ack": True, "id": "snack-7", "source": "/elsewhere"}), "/elsewhere"),
        (answer_with(200, {"ack": True, "id": "snack-7"}), "source None"),
        (answer_with(200, {"ack": "true", "id": "snack-7", "source": SOURCE}), "ack="),
        (answer_with(200, {"ack": 1, "id": "snack-7", "source": SOURCE}), "ack="),
        (answer_with(200, {"id": "snack-7", "source": SOURCE}), "ack="),
        (answer_with(200, [True]), "object"),
        (answer_with(200, b"{not json"), "JSON"),
        (answer_with(200, b""), "JSON"),
        (answer_with(500, {"ack": True, "id": "snack-7", "source": SOURCE}), "500"),
        (answer_with(201, {"ack": True, "id": "snack-7", "source": SOURCE}), "201"),
        (answer_with(400, {"detail": "qty: missing"}), "qty: missing"),
    ],
)
def test_anything_but_an_exact_ack_is_refused(answer: bytes, message: str) -> None:
    with RawServer(lambda body: answer) as server, pytest.raises(NotAcknowledged, match=message):
        send_http(EVENT, server.url)


def test_redirects_are_never_followed() -> None:
    with RawServer(ack_for) as elsewhere:
        location = {"Location": elsewhere.url}
        with RawServer(lambda body: answer_with(302, b"", location)) as server:
            with pytest.raises(NotAcknowledged, match="302") as info:
                send_http(EVENT, server.url)
            assert info.value.status == 302
        assert elsewhere.connections == 0


def test_a_huge_answer_is_refused_without_reading_it_all() -> None:
    huge = 20 * 1024 * 1024

    def flood(body: bytes) -> bytes:
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {huge}\r\n\r\n".encode()
        return head + b"x" * huge

    with RawServer(flood) as server:
        with pytest.raises(NotAcknowledged, match="too large"):
            send_http(EVENT, server.url)
        time.sleep(0.2)
        assert server.bytes_sent < huge // 2


CHUNK = b"%x\r\n" % 4096 + b"x" * 4096 + b"\r\n"


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * (20 * 1024 * 1024),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNK * 5000,
    ],
    ids=["until-close", "chunked"],
)
def test_a_huge_answer_without_length_is_cut_at_the_cap(answer: bytes) -> None:
    with RawServer(lambda body: answer) as server:
        with pytest.raises(NotAcknowledged, match="over 65536"):
            send_http(EVENT, server.url)
        time.sleep(0.2)
        assert server.bytes_sent < 10 * 1024 * 1024


def test_a_connection_closed_without_an_answer_raises() -> None:
    with RawServer(lambda body: None) as server, pytest.raises(OSError):
        send_http(EVENT, server.url)


def test_a_silent_server_times_out() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/events"
        with pytest.raises(OSError):
            send_http(EVENT, url, timeout=0.3)
    finally:
        listener.close()


def test_nobody_listening_raises_oserror() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(OSError):
        send_http(EVENT, f"http://127.0.0.1:{port}/events")


def test_proxy_variables_are_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    with RawServer(ack_for) as proxy, RawServer(ack_for) as server:
        proxy_url = f"http://127.0.0.1:{proxy.port}"
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY"):
            monkeypatch.setenv(name, proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert send_http(EVENT, server.url) is True
        assert proxy.connections == 0
        assert server.connections == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://sink.invalid/events",
        "http://sink.invalid:8080/events",
        "https://127.0.0.1/events",
        "ftp://127.0.0.1/events",
        "http://127.0.0.1/events?x=1",
        "http://127.0.0.1/shipping/events?x=1",
        "http://127.0.0.1/caf\u00e9/events",
        "http://127.0.0.1/events?",
        "http://127.0.0.1/events#frag",
        "http://user:pw@127.0.0.1/events",
        "http://127.0.0.1@sink.invalid/events",
        "http://127.0.0.2/events",
        "http://127.0.0.1:99999/events",
        "http://127.0.0.1:port/events",
        "http:// 127.0.0.1/events",
        "//127.0.0.1/events",
        "127.0.0.1/events",
        "",
    ],
)
def test_unsafe_targets_are_refused_before_any_connection(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    touched = forbid_network(monkeypatch)
    with pytest.raises(UnsafeTarget):
        send_http(EVENT, url)
    assert touched == []


def test_a_checked_route_is_kept_but_never_for_other_options() -> None:
    """``send_http`` checks its URL and options once and keeps the result for the same ones:
    a time-out of True is still refused after one of 1 was taken (True == 1 in Python), and
    an unhashable allow-list is still checked and named."""
    with RawServer(ack_for) as server:
        assert send_http(EVENT, server.url, timeout=1) is True
        with pytest.raises(ValueError, match="timeout: must be a number"):
            send_http(EVENT, server.url, timeout=True)
        assert send_http(EVENT, server.url, allowed_hosts=["example.org"]) is True
        with pytest.raises(TypeError, match="allowed_hosts: every host"):
            send_http(EVENT, server.url, allowed_hosts=[["example.org"]])  # type: ignore[list-item]
        assert len(server.requests) == 2


def test_non_string_url_is_refused() -> None:
    with pytest.raises(UnsafeTarget):
        send_http(EVENT, b"http://127.0.0.1/events")  # type: ignore[arg-type]


def test_an_explicit_allow_list_widens_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    from ackledger.wire.targets import check_target

    with pytest.raises(UnsafeTarget):
        check_target("http://sink.invalid/events")
    assert check_target("http://sink.invalid:81/events", allowed_hosts=["sink.invalid"]).port == 81


def test_localhost_and_ipv6_loopback_are_allowed() -> None:
    with RawServer(ack_for) as server:
        assert send_http(EVENT, f"http://localhost:{server.port}/events") is True
    try:
        six = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    six.close()
    from ackledger.wire.targets import check_target

    assert check_target("http://[::1]:8080/events").host == "::1"


def test_an_invalid_event_is_refused_before_sending() -> None:
    with RawServer(ack_for) as server:
        with pytest.raises(ValueError, match="qty"):
            send_http({**lab("x", "s", 1), "data": {"sku": "s", "qty": 0}}, server.url)
        assert server.connections == 0


def batch_answer(acks: list[dict[str, object]], error: dict[str, object] | None = None) -> bytes:
    payload: dict[str, object] = {"acks": acks}
    if error:
        payload["error"] = error
    return answer_with(200, payload)


BATCH = [lab(f"b-{i}", "s", 1) for i in range(3)]


def acks(*ids: str) -> list[dict[str, object]]:
    return [{"id": i, "source": SOURCE, "ack": True, "status": "applied"} for i in ids]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (batch_answer(acks("b-0", "b-1", "b-2")), 3),
        (batch_answer(acks("b-0"), {"status": 422}), 1),
        (batch_answer([], {"status": 400}), 0),
        (
            batch_answer(
                [*acks("b-0"), {"id": "b-1", "source": SOURCE, "ack": False}, *acks("b-2")]
            ),
            1,
        ),
        # An item naming another event ends the prefix; the items before it stay acknowledged.
        (batch_answer(acks("b-1")), 0),
        (batch_answer([*acks("b-0"), {**acks("b-1")[0], "source": "urn:other"}, *acks("b-2")]), 1),
    ],
)
def test_batch_counts_the_acknowledged_prefix(answer: bytes, expected: int) -> None:
    with RawServer(lambda body: answer) as server:
        url = server.url + "/batch"
        assert send_http_batch(BATCH, url) == expected
        assert json.loads(server.requests[0]) == BATCH


@pytest.mark.parametrize(
    "answer",
    [
        batch_answer(acks("b-0", "b-1", "b-2", "b-3")),
        answer_with(200, {"acks": "all"}),
        answer_with(200, [1, 2]),
        answer_with(200, {"acks": [True]}),
        answer_with(500, {"acks": []}),
    ],
)
def test_batch_refuses_malformed_or_foreign_answers(answer: bytes) -> None:
    with RawServer(lambda body: answer) as server, pytest.raises(NotAcknowledged):
        send_http_batch(BATCH, server.url + "/batch")


def test_batch_target_and_size_rules() -> None:
    with pytest.raises(UnsafeTarget, match="query"):
        send_http_batch(BATCH, "http://127.0.0.1/events/batch?x=1")
    with pytest.raises(ValueError):
        send_http_batch([], "http://127.0.0.1/events/batch")
    with pytest.raises(ValueError):
        send_http_batch(BATCH * 6, "http://127.0.0.1/events/batch")


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://127.0.0.1/shipping/events?token=x", "a query or fragment is not allowed"),
        ("http://127.0.0.1/shipping/events#top", "a query or fragment is not allowed"),
        ("http://ops:secret@127.0.0.1/shipping/events", "user information is not allowed"),
        ("http://127.0.0.1/env\u00edos/events", "the path must be ASCII"),
    ],
)
def test_a_target_at_any_path_is_refused_for_what_it_carries(
    url: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    touched = forbid_network(monkeypatch)
    with pytest.raises(UnsafeTarget, match=named) as refused:
        send_http(EVENT, url)
    assert "secret" not in str(refused.value)
    with pytest.raises(UnsafeTarget, match=named):
        send_http_batch(BATCH, url)
    with pytest.raises(UnsafeTarget, match=named):
        sender(url)
    assert touched == []


@pytest.mark.parametrize(
    ("path", "batch_path"),
    [
        ("/shipping/events", "/shipping/events/batch"),
        ("/shipping/events/", "/shipping/events/batch"),
        ("/in", "/in/batch"),
        ("", "/batch"),
    ],
)
def test_any_path_is_posted_to_and_a_batch_goes_to_it_plus_batch(
    path: str, batch_path: str
) -> None:
    def answer(body: bytes) -> bytes:
        sent = json.loads(body)
        return (
            batch_answer(acks(*(e["id"] for e in sent)))
            if isinstance(sent, list)
            else ack_for(body)
        )

    with RawServer(answer) as server:
        url = f"http://127.0.0.1:{server.port}{path}"
        assert send_http(EVENT, url) is True
        assert send_http_batch(BATCH, url.rstrip("/") + "/batch") == 3
        built = sender(url)
        try:
            assert built.send(EVENT) is True
            assert built.send_batch(BATCH) == 3
        finally:
            built.close()
        lines = [head.split(b"\r\n", 1)[0] for head in server.heads]
        single = b"POST %s HTTP/1.1" % (path or "/").encode()
        batch = b"POST %s HTTP/1.1" % batch_path.encode()
        assert lines == [single, batch, single, batch]


def test_a_services_base_url_keeps_the_path_it_is_mounted_at() -> None:
    from ackledger.wire.targets import base_url

    # What trace, status and reconcile ask a sink at: its routes sit below the mount.
    assert base_url("http://127.0.0.1:8/shipping/events") == "http://127.0.0.1:8/shipping"
    assert base_url("http://127.0.0.1:8/events") == "http://127.0.0.1:8"
    assert base_url("http://127.0.0.1:8/") == "http://127.0.0.1:8"
    assert base_url("http://127.0.0.1:8/shipping/metrics") == "http://127.0.0.1:8/shipping"
    for wrong in ("http://127.0.0.1:8/shipping", "http://127.0.0.1:8/events?x=1"):
        with pytest.raises(UnsafeTarget):
            base_url(wrong)


def test_kept_connections_turn_nagle_off() -> None:
    # http.client sends a request's head and body in two writes; with Nagle's algorithm on,
    # the body can wait for the peer's delayed ACK of the head.
    from ackledger.wire.http import _pool

    with RawServer(ack_for) as server:
        assert send_http(EVENT, server.url) is True
        conn = _pool()[("127.0.0.1", server.port)]
        assert conn.sock is not None
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# The answer parser of the keep-alive client, against scripted raw answers.

ACK_BODY = json.dumps({"ack": True, "id": "snack-7", "source": SOURCE}).encode()


def chunked(body: bytes, sizes: list[int], extra_head: str = "", trailer: bytes = b"") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{extra_head}\r\n".encode()
    parts, at = [], 0
    for size in sizes:
        parts.append(b"%x;name=value\r\n" % size + body[at : at + size] + b"\r\n")
        at += size
    assert at == len(body)
    return head + b"".join(parts) + b"0\r\n" + trailer + b"\r\n"


def test_a_chunked_answer_is_read_and_the_connection_kept() -> None:
    answer = chunked(ACK_BODY, [1, 10, len(ACK_BODY) - 11], trailer=b"X-Checksum: 1\r\n")
    with RawServer(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True
        assert send_http(EVENT, server.url) is True
        assert server.connections == 1


def test_a_content_length_just_over_the_cap_is_refused() -> None:
    answer = http_answer(200, b" " * 65537)
    with RawServer(lambda body: answer) as server, pytest.raises(NotAcknowledged, match="too"):
        send_http(EVENT, server.url)


def raw(head: bytes, body: bytes = ACK_BODY) -> bytes:
    return head + b"\r\n\r\n" + body


@pytest.mark.parametrize(
    "answer",
    [
        raw(b"HTTP/1.1 200 OK\r\nContent-Length 27"),  # a header line without colon
        raw(b"HTTP/1.1 200 OK\r\nContent-Length : %d" % len(ACK_BODY)),  # space before colon
        raw(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"HTTP/2 200 OK\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"HTTP/1.1 2000 OK\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"ICY 200 OK\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"200 OK\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: %d" % len(ACK_BODY)),
        raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked"),
        raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5", b"0\r\n\r\n"),
        raw(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked",
            b"zz\r\n" + ACK_BODY + b"\r\n0\r\n\r\n",
        ),
        raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", b"5\r\nabcdeXY0\r\n\r\n"),
    ],
)
def test_malformed_answers_are_refused(answer: bytes) -> None:
    with RawServer(lambda body: answer) as server:
        with pytest.raises(NotAcknowledged, match="malformed HTTP answer"):
            send_http(EVENT, server.url)
        # The connection is dropped with its state unknown: the next send opens a new one.
        with pytest.raises(NotAcknowledged):
            send_http(EVENT, server.url)
        assert server.connections == 2


def test_an_interim_answer_is_refused() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + http_answer(200, ACK_BODY)
    with RawServer(lambda body: answer) as server:
        with pytest.raises(NotAcknowledged, match="100") as info:
            send_http(EVENT, server.url)
        assert info.value.status == 100


def test_bytes_after_the_answer_are_never_taken_for_the_next_answer() -> None:
    # The first answer carries a second, well-formed ACK behind it; the next event's real
    # answer is a 500. Reading the stray ACK as the next answer would lose that event.
    stray = http_answer(200, json.dumps({"ack": True, "id": "second", "source": SOURCE}).encode())

    def script(body: bytes) -> bytes:
        if json.loads(body)["id"] == "second":
            return answer_with(500, {"detail": "disk full"})
        return http_answer(200, ACK_BODY) + stray

    with RawServer(script) as server:
        with pytest.raises(NotAcknowledged, match="longer than declared"):
            send_http(EVENT, server.url)
        with pytest.raises(NotAcknowledged, match="disk full"):
            send_http({**EVENT, "id": "second"}, server.url)
        assert server.connections == 2


def test_connection_close_is_honoured() -> None:
    # The server says close but keeps the socket open: only the header makes the client let go.
    answer = http_answer(200, ACK_BODY, {"Connection": "keep-alive, Close"})
    with RawServer(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True
        assert send_http(EVENT, server.url) is True
        assert server.connections == 2
        assert len(server.requests) == 2


def test_an_http_1_0_answer_ends_the_connection() -> None:
    answer = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ACK_BODY) + ACK_BODY
    with RawServer(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True
        assert send_http(EVENT, server.url) is True
        assert server.connections == 2


def test_a_kept_connection_closed_after_the_request_raises_and_is_not_retried() -> None:
    def script(body: bytes) -> bytes | None:
        return None if json.loads(body)["id"] == "second" else http_answer(200, ACK_BODY)

    with RawServer(script) as server:
        assert send_http(EVENT, server.url) is True
        with pytest.raises(OSError):
            send_http({**EVENT, "id": "second"}, server.url)
        assert len(server.requests) == 2  # sent once, never again on a fresh connection
        assert server.connections == 1


@pytest.mark.parametrize("cut", [5, 40])  # inside the head, inside the body
def test_an_answer_cut_short_by_the_server_is_a_connection_failure(cut: int) -> None:
    answer = http_answer(200, ACK_BODY)[:cut]

    with CutServer(lambda body: answer) as server, pytest.raises(OSError):
        send_http(EVENT, server.url)


def test_a_server_stalling_inside_the_body_times_out() -> None:
    answer = http_answer(200, ACK_BODY)[:-5]
    with RawServer(lambda body: answer) as server, pytest.raises(OSError):
        send_http(EVENT, server.url, timeout=0.3)


def test_the_request_is_a_well_formed_http_1_1_post() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                data += conn.recv(65536)
            received.append(data)
            conn.sendall(http_answer(200, ACK_BODY))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert send_http(EVENT, f"http://127.0.0.1:{port}/events") is True
    finally:
        thread.join(5)
        listener.close()
    head, _, body = received[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /events HTTP/1.1"
    fields = dict(line.split(b": ", 1) for line in lines[1:])
    assert fields[b"Host"] == b"127.0.0.1:%d" % port
    assert fields[b"Content-Length"] == b"%d" % len(body)
    assert fields[b"Content-Type"] == b"application/cloudevents+json"
    assert body == canonical_json(EVENT).encode()


# The kept socket is non-blocking: a request larger than what the socket buffers take at
# once is written as the server reads it, and that wait is bounded by the call's time-out too.


def _slow_reader(then: float | None) -> tuple[socket.socket, list[bytes]]:
    """A server that acks its first request at once, then waits ``then`` seconds before it
    reads the second one (never reads it, if None)."""
    listener = socket.create_server(("127.0.0.1", 0))
    bodies: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            got = b""
            for turn in range(2):
                if turn == 1:
                    if then is None:
                        time.sleep(3)
                        return
                    time.sleep(then)
                while b"\r\n\r\n" not in got:
                    got += conn.recv(65536)
                head, got = got.split(b"\r\n\r\n", 1)
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(got) < length:
                    got += conn.recv(65536)
                body, got = got[:length], got[length:]
                bodies.append(body)
                conn.sendall(ack_for(body))

    threading.Thread(target=serve, daemon=True).start()
    return listener, bodies


BIG = {
    "specversion": "1.0",
    "id": "big-1",
    "source": SOURCE,
    "type": "com.example.note",
    "data": {"note": "x" * 60_000},
}


def _small_send_buffer(url: str) -> None:
    """Connect with one small request, then shrink the kept socket's send buffer so that a
    big request cannot be taken in one write (on loopback it grows to megabytes)."""
    assert send_http(EVENT, url) is True
    port = int(url.split(":")[2].partition("/")[0])
    wire_http._pool()[("127.0.0.1", port)].sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
    )


def test_a_request_larger_than_the_socket_buffers_is_written_as_the_server_reads() -> None:
    listener, bodies = _slow_reader(then=0.3)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/events"
        _small_send_buffer(url)
        assert send_http(BIG, url, timeout=5) is True
        assert bodies[1] == canonical_json(BIG).encode()
    finally:
        listener.close()


def test_a_server_that_never_reads_times_the_send_out() -> None:
    listener, _ = _slow_reader(then=None)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/events"
        _small_send_buffer(url)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            send_http(BIG, url, timeout=0.4)
        assert time.monotonic() - started < 2.5  # bounded by the time-out, with slack
    finally:
        listener.close()
