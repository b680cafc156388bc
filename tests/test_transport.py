from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from ackledger import NotAcknowledged, UnsafeTarget, send_http, send_http_batch
from ackledger.transport import close_connections
from tests.rawserver import RawServer, http_answer

EVENT = {"id": "snack-7", "sku": "snack", "qty": 7}


@pytest.fixture(autouse=True)
def fresh_connections() -> Iterator[None]:
    close_connections()
    yield
    close_connections()


def ack_for(body: bytes) -> bytes:
    event = json.loads(body)
    return http_answer(200, json.dumps({"ack": True, "id": event["id"]}).encode())


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
        (answer_with(200, {"ack": True, "id": "other-id"}), "other-id"),
        (answer_with(200, {"ack": "true", "id": "snack-7"}), "ack="),
        (answer_with(200, {"ack": 1, "id": "snack-7"}), "ack="),
        (answer_with(200, {"id": "snack-7"}), "ack="),
        (answer_with(200, [True]), "object"),
        (answer_with(200, b"{not json"), "JSON"),
        (answer_with(200, b""), "JSON"),
        (answer_with(500, {"ack": True, "id": "snack-7"}), "500"),
        (answer_with(201, {"ack": True, "id": "snack-7"}), "201"),
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


def test_a_huge_answer_without_length_is_cut_at_the_cap() -> None:
    def flood(body: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * (20 * 1024 * 1024)

    with RawServer(flood) as server:
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
        "http://127.0.0.1/other",
        "http://127.0.0.1/events/",
        "http://127.0.0.1/",
        "http://127.0.0.1",
        "http://127.0.0.1/events?x=1",
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
    touched: list[object] = []

    def forbidden(*args: object, **kwargs: object) -> None:
        touched.append(args)
        raise AssertionError("no connection or lookup may happen")

    monkeypatch.setattr(socket, "create_connection", forbidden)
    monkeypatch.setattr(socket, "getaddrinfo", forbidden)
    with pytest.raises(UnsafeTarget):
        send_http(EVENT, url)
    assert touched == []


def test_non_string_url_is_refused() -> None:
    with pytest.raises(UnsafeTarget):
        send_http(EVENT, b"http://127.0.0.1/events")  # type: ignore[arg-type]


def test_an_explicit_allow_list_widens_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    from ackledger.transport import check_target

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
    from ackledger.transport import check_target

    assert check_target("http://[::1]:8080/events").host == "::1"


def test_an_invalid_event_is_refused_before_sending() -> None:
    with RawServer(ack_for) as server:
        with pytest.raises(ValueError, match="qty"):
            send_http({"id": "x", "sku": "s", "qty": 0}, server.url)
        assert server.connections == 0


def batch_answer(acks: list[dict[str, object]], error: dict[str, object] | None = None) -> bytes:
    payload: dict[str, object] = {"acks": acks}
    if error:
        payload["error"] = error
    return answer_with(200, payload)


BATCH = [{"id": f"b-{i}", "sku": "s", "qty": 1} for i in range(3)]


def acks(*ids: str) -> list[dict[str, object]]:
    return [{"id": i, "ack": True, "status": "applied"} for i in ids]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (batch_answer(acks("b-0", "b-1", "b-2")), 3),
        (batch_answer(acks("b-0"), {"status": 422}), 1),
        (batch_answer([], {"status": 400}), 0),
        (batch_answer([*acks("b-0"), {"id": "b-1", "ack": False}, *acks("b-2")]), 1),
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
        batch_answer(acks("b-1")),
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
    with pytest.raises(UnsafeTarget):
        send_http_batch(BATCH, "http://127.0.0.1/events")
    with pytest.raises(ValueError):
        send_http_batch([], "http://127.0.0.1/events/batch")
    with pytest.raises(ValueError):
        send_http_batch(BATCH * 6, "http://127.0.0.1/events/batch")


def test_kept_connections_turn_nagle_off() -> None:
    # http.client sends a request's head and body in two writes; with Nagle's algorithm on,
    # the body can wait for the peer's delayed ACK of the head.
    from ackledger.transport import _pool

    with RawServer(ack_for) as server:
        assert send_http(EVENT, server.url) is True
        conn = _pool()[("127.0.0.1", server.port)]
        assert conn.sock is not None
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
