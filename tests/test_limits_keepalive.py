"""The read time-outs and the answers on kept-alive connections of a real ``serve sink``
(``--read-timeout 1``): each connection has one deadline and one timer
(``web.limited_protocol``), and pipelined answers come whole and in order. Bounds on time are
generous: they tell "closed by the time-out" from "never closed", and "kept open" from "closed
at the first timer"."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackledger.ops.processes import Service, start_service
from tests.events import lab


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Service]:
    args = ["serve", "sink", "--db", str(tmp_path / "db.sqlite"), "--port", "0"]
    with start_service([*args, "--read-timeout", "1"]) as running:
        yield running


def _request(port: int, event_id: str) -> bytes:
    body = json.dumps(lab(event_id, "s1", 1)).encode()
    return (
        f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/cloudevents+json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _answers(sock: socket.socket, count: int) -> list[tuple[bytes, dict[str, object]]]:
    """``count`` answers read off ``sock``: (status line, JSON body) each, in order."""
    sock.settimeout(30)
    buffer = b""
    found: list[tuple[bytes, dict[str, object]]] = []
    while len(found) < count:
        head_end = buffer.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buffer[:head_end].split(b"\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head[1:]
                if line.lower().startswith(b"content-length:")
            )
            end = head_end + 4 + length
            if len(buffer) >= end:
                found.append((head[0], json.loads(buffer[head_end + 4 : end])))
                buffer = buffer[end:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {len(found)} answers"
        buffer += chunk
    return found


@pytest.mark.slow
def test_a_busy_kept_alive_connection_outlives_the_read_timeout(sink: Service) -> None:
    """Requests back to back for 3 s on one connection (3 read time-outs): the connection's
    timer fires while requests come and go, and must find nothing overdue."""
    with socket.create_connection(("127.0.0.1", sink.port)) as sock:
        started, number = time.monotonic(), 0
        while time.monotonic() - started < 3:
            sock.sendall(_request(sink.port, f"busy-{number}"))
            ((status, answer),) = _answers(sock, 1)
            assert status == b"HTTP/1.1 200 OK"
            assert answer["id"] == f"busy-{number}"
            number += 1
            time.sleep(0.05)
        assert number > 10


@pytest.mark.slow
def test_a_slow_second_head_on_a_kept_alive_connection_is_cut_off(sink: Service) -> None:
    """After one full request and 1.5 s of keep-alive idling (past the first timer), the
    next head is sent a byte at a time: the connection is closed while it still trickles."""
    with socket.create_connection(("127.0.0.1", sink.port)) as sock:
        sock.sendall(_request(sink.port, "first"))
        ((status, _),) = _answers(sock, 1)
        assert status == b"HTTP/1.1 200 OK"
        time.sleep(1.5)
        sock.sendall(f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{sink.port}\r\n".encode())
        started, closed = time.monotonic(), False
        while not closed and time.monotonic() - started < 30:
            try:
                sock.sendall(b"X")
                sock.settimeout(0.2)
                closed = sock.recv(65536) == b""
            except TimeoutError:
                pass
            except OSError:
                closed = True
        assert closed, "a slow head after a kept-alive request was never cut off"


def test_pipelined_requests_are_answered_whole_and_in_order(sink: Service) -> None:
    """Three requests in one write, the last a repeat of the first: three complete answers
    in their order, each with its own length (never mixed)."""
    with socket.create_connection(("127.0.0.1", sink.port)) as sock:
        sock.sendall(b"".join(_request(sink.port, name) for name in ("p-1", "p-2", "p-1")))
        answers = _answers(sock, 3)
    assert [answer["id"] for _, answer in answers] == ["p-1", "p-2", "p-1"]
    assert [answer["status"] for _, answer in answers] == ["applied", "applied", "duplicate"]


def _raw(port: int, body: bytes) -> bytes:
    return (
        f"POST /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/cloudevents+json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@pytest.mark.slow
def test_pipelined_requests_of_every_outcome_are_answered_in_order(sink: Service) -> None:
    """A new event, its re-send (answered from the lone read), the same identity with other
    content, a malformed body and another new event, in one write: five answers in their
    order, the refusals leave the connection usable, and only the two new events apply."""
    port = sink.port
    other = json.dumps(lab("q-1", "s1", 9)).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            _request(port, "q-1")
            + _request(port, "q-1")
            + _raw(port, other)
            + _raw(port, b'{"specversion": "1.0", "id": ')
            + _request(port, "q-2")
        )
        answers = _answers(sock, 5)
        statuses = [line.split(b" ")[1] for line, _ in answers]
        assert statuses == [b"200", b"200", b"422", b"400", b"200"]
        assert [answers[i][1]["status"] for i in (0, 1, 4)] == ["applied", "duplicate", "applied"]
        assert [answers[i][1]["id"] for i in (0, 1, 4)] == ["q-1", "q-1", "q-2"]
        sock.sendall(_request(port, "q-2"))  # still kept after the refusals
        ((line, answer),) = _answers(sock, 1)
        assert line.split(b" ")[1] == b"200" and answer["status"] == "duplicate"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        text = b""
        while chunk := sock.recv(65536):
            text += chunk
    assert b"200 OK" in text.split(b"\r\n", 1)[0]
    # Each outcome counted once: the lone re-sends as duplicates, the other content as one
    # conflict, the 400 as nothing.
    for name, count in (("applied", 2), ("duplicates", 2), ("conflicts", 1)):
        assert f'ackledger_sink_{name}_total{{scope="database"}} {count}.0'.encode() in text
