"""The answer parsers of the keep-alive client: llhttp (httptools) and the http.client fallback.

Each test runs with both, against raw answers that the new parsers read differently from a
hand-written one: answers split over many reads, chunked bodies, bodies at and over the cap.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ackledger import NotAcknowledged, send_http
from ackledger.wire import _llhttp, _stdlib
from ackledger.wire import http as wire_http
from ackledger.wire.framing import MAX_ANSWER_BYTES, MAX_HEADERS
from ackledger.wire.http import close_connections
from tests.events import SOURCE, lab
from tests.rawserver import CutServer, RawServer, http_answer

EVENT = lab("snack-7", "snack", 7)
ACK_BODY = json.dumps({"ack": True, "id": "snack-7", "source": SOURCE}).encode()
#: An ACK padded with JSON whitespace to exactly the cap.
ACK_AT_CAP = ACK_BODY + b" " * (MAX_ANSWER_BYTES - len(ACK_BODY))
PARSERS = {"llhttp": _llhttp.read_answer, "stdlib": _stdlib.read_answer}


@pytest.fixture(autouse=True, params=sorted(PARSERS))
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(wire_http, "read_answer", PARSERS[request.param])
    close_connections()
    yield str(request.param)
    close_connections()


def chunked_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def in_chunks(body: bytes, size: int) -> bytes:
    parts = [b"%x\r\n" % len(body[at : at + size]) + body[at : at + size] + b"\r\n"
             for at in range(0, len(body), size)]  # fmt: skip
    return b"".join(parts) + b"0\r\n\r\n"


class Trickle(RawServer):
    """Sends each answer a byte at a time, so that every read sees a piece of it."""

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for at in range(len(data)):
            super()._send(conn, data[at : at + 1])
            time.sleep(0.001)


@pytest.mark.parametrize(
    "answer",
    [http_answer(200, ACK_BODY), chunked_head() + in_chunks(ACK_BODY, 7)],
    ids=["content-length", "chunked"],
)
def test_an_answer_split_over_many_reads_is_read_whole(answer: bytes) -> None:
    with Trickle(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True
        assert send_http(EVENT, server.url) is True
        assert server.connections == 1


def test_a_body_of_one_byte_chunks_is_read() -> None:
    answer = chunked_head() + in_chunks(ACK_BODY, 1)
    with RawServer(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True
        assert server.connections == 1


def test_spaces_after_a_chunk_size_are_taken() -> None:
    answer = chunked_head() + b"%x \t\r\n" % len(ACK_BODY) + ACK_BODY + b"\r\n0\r\n\r\n"
    with RawServer(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True


@pytest.mark.parametrize(
    "answer",
    [
        http_answer(200, ACK_AT_CAP),
        chunked_head() + in_chunks(ACK_AT_CAP, 4096),
        chunked_head() + in_chunks(ACK_AT_CAP, MAX_ANSWER_BYTES),
    ],
    ids=["content-length", "chunked", "one-chunk"],
)
def test_a_body_of_exactly_the_cap_is_taken(answer: bytes) -> None:
    with RawServer(lambda body: answer) as server:
        assert send_http(EVENT, server.url) is True
        assert server.connections == 1


@pytest.mark.parametrize(
    "answer",
    [
        chunked_head() + in_chunks(ACK_AT_CAP + b" ", 4096),
        chunked_head() + in_chunks(ACK_AT_CAP + b" ", MAX_ANSWER_BYTES + 1),
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + ACK_AT_CAP + b" ",
    ],
    ids=["chunked", "one-chunk", "until-close"],
)
def test_one_byte_over_the_cap_is_refused(answer: bytes) -> None:
    with RawServer(lambda body: answer, close_after_answer=True) as server:
        with pytest.raises(NotAcknowledged, match=f"over {MAX_ANSWER_BYTES}") as info:
            send_http(EVENT, server.url)
        assert info.value.status == 200


@pytest.mark.parametrize("body", [ACK_BODY, ACK_AT_CAP], ids=["small", "at-cap"])
def test_a_body_ended_by_the_close_is_taken_and_the_connection_not_kept(body: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\n\r\n" + body
    with RawServer(lambda request: answer, close_after_answer=True) as server:
        assert send_http(EVENT, server.url) is True
        assert send_http(EVENT, server.url) is True
        assert server.connections == 2


def test_one_connection_reads_answer_after_answer_of_every_framing() -> None:
    """The kept connection's reader (llhttp's parser goes on from one answer to the next)
    judges each answer on its own: a chunked ACK, then one framed by Content-Length, then a
    refusal, all on one connection."""
    answers = iter(
        [
            chunked_head() + in_chunks(ACK_BODY, 5),
            http_answer(200, ACK_BODY.replace(b"snack-7", b"snack-8")),
            http_answer(503, b'{"detail": "busy"}'),
        ]
    )
    with RawServer(lambda body: next(answers)) as server:
        assert send_http(EVENT, server.url) is True
        assert send_http({**EVENT, "id": "snack-8"}, server.url) is True
        with pytest.raises(NotAcknowledged, match="HTTP 503 instead of 200: busy") as info:
            send_http(EVENT, server.url)
        assert info.value.status == 503
        assert server.connections == 1


def test_bytes_after_a_chunked_answer_are_refused() -> None:
    answer = chunked_head() + in_chunks(ACK_BODY, 8) + http_answer(200, ACK_BODY)
    with (
        RawServer(lambda body: answer) as server,
        pytest.raises(NotAcknowledged, match="longer than declared") as info,
    ):
        send_http(EVENT, server.url)
    assert info.value.status == 200


@pytest.mark.parametrize(
    "answer",
    [
        http_answer(200, ACK_BODY, {"X-Long": "a" * (17 * 1024)}),
        http_answer(200, ACK_BODY, {f"X-{i}": "1" for i in range(MAX_HEADERS + 1)}),
        chunked_head() + b"-5\r\nabcde\r\n0\r\n\r\n",
        chunked_head() + b"5\r\nabcde\r\n0\r\n\r\n0\r\n\r\n",
    ],
    ids=["head-over-16k", "over-100-headers", "negative-chunk", "two-last-chunks"],
)
def test_more_malformed_answers_are_refused(answer: bytes) -> None:
    with RawServer(lambda body: answer) as server:
        with pytest.raises(NotAcknowledged):
            send_http(EVENT, server.url)
        with pytest.raises(NotAcknowledged):
            send_http(EVENT, server.url)
        assert server.connections == 2  # each refusal dropped its connection


@pytest.mark.parametrize("cut", [60, 75])  # inside a chunk, inside the last chunk's line
def test_a_chunked_answer_cut_short_is_a_connection_failure(cut: int) -> None:
    answer = (chunked_head() + in_chunks(ACK_BODY, 16))[:cut]

    with CutServer(lambda body: answer) as server, pytest.raises(OSError):
        send_http(EVENT, server.url)


def in_fresh_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_httptools_is_used_when_it_imports() -> None:
    pytest.importorskip("httptools")
    code = (
        "from ackledger.wire import _llhttp, http\nprint(http.read_answer is _llhttp.read_answer)"
    )
    assert in_fresh_python(code) == "True"


def test_the_core_sends_without_httptools() -> None:
    # A fresh interpreter where httptools cannot be imported: the fallback is chosen and
    # a whole send works through it.
    code = """
import json, socket, sys, threading
sys.modules["httptools"] = None
import ackledger
from ackledger.wire import _stdlib, http
assert http.read_answer is _stdlib.read_answer, http.read_answer
body = json.dumps({"ack": True, "id": "e-1", "source": "/s"}).encode()
listener = socket.create_server(("127.0.0.1", 0))
def serve():
    conn, _ = listener.accept()
    with conn:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
threading.Thread(target=serve, daemon=True).start()
url = "http://127.0.0.1:%d/events" % listener.getsockname()[1]
event = ackledger.warehouse.event("e-1", "s", 1, source="/s")
assert ackledger.send_http(event, url) is True
print("ok")
"""
    assert in_fresh_python(code) == "ok"


@pytest.mark.parametrize("length", [b"+2", b"2, 2", b"two"])
def test_a_refusal_with_a_bad_length_keeps_its_status(length: bytes) -> None:
    # The status decides transient or permanent: a 422 whose framing is malformed must still
    # be judged a refusal (poison), never a retry of a malformed answer.
    answer = b"HTTP/1.1 422 Unprocessable Content\r\nContent-Length: " + length + b"\r\n\r\n{}"
    with RawServer(lambda body: answer) as server, pytest.raises(NotAcknowledged) as caught:
        send_http(EVENT, server.url)
    assert caught.value.status == 422
